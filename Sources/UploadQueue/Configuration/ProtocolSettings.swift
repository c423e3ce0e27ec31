import Foundation

extension Destination {
    /// What a destination's protocol alone has: each case carries its own settings, so a combination the protocol
    /// cannot use (a form field on a directory, an S3 destination without a bucket) cannot be written.
    public enum ProtocolSettings: Sendable, Equatable {
        /// `protocol = "file"`: a local directory.
        case localDirectory(LocalDirectorySettings)
        /// `protocol = "tus"`: tus 1.0 resumable uploads.
        case tus(TusSettings)
        /// `protocol = "http-put"`: one whole-file PUT.
        case httpPut(HTTPPutSettings)
        /// `protocol = "http-post"`: one whole-file `multipart/form-data` POST.
        case httpPost(HTTPPostSettings)
        /// `protocol = "s3"`: a bucket.
        case s3(S3Settings)
        /// `protocol = "rufh"`: IETF Resumable Uploads for HTTP.
        case rufh(RUFHSettings)
        /// `protocol = "s3"` with `mint_url`: a bucket the app's backend presigns for, Uppy Companion's way.
        case mintedS3(MintedS3Settings)

        /// The protocol's name.
        public var transferProtocol: TransferProtocol {
            switch self {
            case .localDirectory: .file
            case .tus: .tus
            case .httpPut: .httpPut
            case .httpPost: .httpPost
            case .s3, .mintedS3: .s3
            case .rufh: .rufh
            }
        }

        /// Whether a name the protocol makes for a job (`url`, `name_template`, `key_template`) uses `{sha256}`.
        var namesUseSHA256: Bool {
            switch self {
            case .localDirectory(let directory): directory.nameTemplate.usesSHA256
            case .tus, .rufh, .mintedS3: false
            case .httpPut(let put): put.target.usesSHA256
            case .httpPost(let post): post.target.usesSHA256
            case .s3(let s3): s3.keyTemplate.usesSHA256
            }
        }
    }
}

extension Destination {
    /// `protocol = "file"`: where in the local file system files go, and under which name.
    public struct LocalDirectorySettings: Sendable, Equatable {
        /// The target directory, resolved.
        public var directory: String
        /// The name under the directory; `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, `{meta.KEY}`.
        public var nameTemplate: PathTemplate
        /// Bytes copied between two durable checkpoints (`chunk_size`): a crash copies at most this much again.
        public var checkpointSize: Int64
        /// `file_mode`: the permission bits a delivered file gets, within its source's (nil: its source's).
        public var fileMode: UInt32?

        /// Files named by `nameTemplate` under `directory`, a checkpoint every 8 MiB, with their source's mode.
        public init(directory: String, nameTemplate: PathTemplate = .defaultFileName, checkpointSize: Int64 = 8 << 20,
                    fileMode: UInt32? = nil) {
            self.directory = directory
            self.nameTemplate = nameTemplate
            self.checkpointSize = checkpointSize
            self.fileMode = fileMode
        }

        /// The mode of a delivered file whose source's bits, kept in its own group, are `kept`
        /// (`FileFingerprint.modeKept`): narrowed to `fileMode` when set; never wider than the source's.
        public func deliveredMode(kept: UInt32) -> UInt32 {
            kept & (fileMode ?? 0o777)
        }
    }
}

extension Destination {
    /// `protocol = "tus"`: the creation endpoint and how the file is cut into PATCH requests.
    public struct TusSettings: Sendable, Equatable {
        /// The creation URL (`https://host/files/`), one for all uploads.
        public var endpoint: String
        /// Bytes per PATCH: a reset sends at most this much again.
        public var chunkSize: Int64
        /// Send a file of one chunk or less in the creation request itself (one round trip less). Off by default: if
        /// that request is cut off after the server stored the file, its upload URL is never learnt and the file is
        /// sent again as a second upload.
        public var creationWithUpload: Bool

        /// Uploads created at `endpoint`, 8 MiB per PATCH.
        public init(endpoint: String, chunkSize: Int64 = 8 << 20, creationWithUpload: Bool = false) {
            self.endpoint = endpoint
            self.chunkSize = chunkSize
            self.creationWithUpload = creationWithUpload
        }
    }
}

extension Destination {
    /// Where a whole-file upload goes: a URL template of the config, or a target the app's backend mints per file.
    public enum WholeFileTarget: Sendable, Equatable {
        /// `url`: the template, its placeholders filled per job.
        case template(URLTemplate)
        /// `mint_url` or `mint_command`: the backend says where (and whether to PUT or POST) for each file.
        case minted(MintSource)

        /// Whether the URL names `{sha256}`.
        var usesSHA256: Bool {
            if case .template(let url) = self { return url.usesSHA256 }
            return false
        }
    }
}

extension Destination {
    /// `protocol = "http-put"`: where each file is PUT.
    public struct HTTPPutSettings: Sendable, Equatable {
        /// The URL template, or the backend that mints a target per file.
        public var target: WholeFileTarget
        /// How the upload proves the server holds the file (`verify`): a `HEAD` of the stored URL for a template, the
        /// storage's answer for a minted target (whose URL is signed for the PUT alone).
        public var verify: WholeFileVerification

        /// Files PUT to `url`, each checked with a `HEAD`.
        public init(url: URLTemplate, verify: WholeFileVerification = .head) {
            target = .template(url)
            self.verify = verify
        }

        /// Files sent where `target` says, proven as the target allows by default.
        public init(target: WholeFileTarget, verify: WholeFileVerification? = nil) {
            self.target = target
            if case .minted = target {
                self.verify = verify ?? .response
            } else {
                self.verify = verify ?? .head
            }
        }
    }
}

extension Destination {
    /// `protocol = "http-post"`: where each file is POSTed, and in which form field.
    public struct HTTPPostSettings: Sendable, Equatable {
        /// The URL template, or the backend that mints a target per file.
        public var target: WholeFileTarget
        /// The form field that carries the file (the job's meta go as fields beside it); a minted POST names its own
        /// fields and sends the file as `file`.
        public var formField: String
        /// How the answer proves the server took the file (`verify`): `.response` (the default) or `.status`.
        public var verify: WholeFileVerification = .response
        /// Where the answer names the stored file (`remote_url_from = "json:/url"`): required in the answer when set,
        /// and the job's remote URL.
        public var remoteURLFrom: RemoteURLSource?

        /// Files POSTed to `url` in the field `formField`.
        public init(url: URLTemplate, formField: String = "file") {
            target = .template(url)
            self.formField = formField
        }

        /// Files sent where `target` says.
        public init(target: WholeFileTarget, formField: String = "file") {
            self.target = target
            self.formField = formField
        }
    }
}

extension Destination {
    /// `protocol = "rufh"`: the creation endpoint, the draft's interop version and how the file is cut into appends.
    public struct RUFHSettings: Sendable, Equatable {
        /// The interop versions uploadq speaks: 6 (drafts -04 and -05, Apple's URLSession since iOS 18.1, tusd), 7
        /// (-06 to -08) and 8 (-09 to -11).
        public static let interopVersions = 6...8

        /// Where uploads are created (`POST`), one URL for all uploads.
        public var endpoint: String
        /// `Upload-Draft-Interop-Version`, sent on every request.
        public var interopVersion: Int
        /// Bytes per append, within the server's `max-append-size`: a reset sends at most this much again.
        public var chunkSize: Int64
        /// Whether a file of one append or less goes whole in its creation request (`Upload-Complete: ?1`): one
        /// request a file instead of two, at the risk a careful creation does not take (see `RUFHUploader`).
        public var creationWithUpload: Bool

        /// Uploads created at `endpoint` with interop version 6, 8 MiB per append, each created empty first.
        public init(endpoint: String, interopVersion: Int = 6, chunkSize: Int64 = 8 << 20,
                    creationWithUpload: Bool = false) {
            self.endpoint = endpoint
            self.interopVersion = interopVersion
            self.chunkSize = chunkSize
            self.creationWithUpload = creationWithUpload
        }
    }
}

extension Destination {
    /// `protocol = "s3"` with `mint_url`: the app's backend (Uppy Companion, or one that serves its `/s3/params` and
    /// `/s3/multipart` routes) names each object's key and presigns every request, so the device holds no S3 keys.
    public struct MintedS3Settings: Sendable, Equatable {
        /// The backend's base URL (`https://api.example.com/companion`), under which `/s3/…` is served.
        public var base: String
        /// Files of at least this many bytes go up in parts; smaller ones in one presigned PUT or POST.
        public var multipartThreshold: Int64
        /// The part size asked for; grown when a file would need more than 10,000 parts.
        public var partSize: Int64
        /// Parts sent at once for one file, each signed just before it is sent.
        public var partConcurrency: Int
        /// What the store's ETags are: the MD5 of the bytes (checked against each part and object), or opaque.
        public var etags: S3Settings.ETags = .md5

        /// Parts of 8 MiB from 16 MiB on, two at a time.
        public init(base: String, multipartThreshold: Int64 = 16 << 20, partSize: Int64 = 8 << 20, partConcurrency: Int = 2) {
            self.base = base
            self.multipartThreshold = multipartThreshold
            self.partSize = partSize
            self.partConcurrency = partConcurrency
        }
    }
}

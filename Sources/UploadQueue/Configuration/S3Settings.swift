import Foundation

extension Destination {
    /// Where and how an `s3` destination stores objects: endpoint, bucket, region, object keys, part sizes and
    /// credentials.
    public struct S3Settings: Sendable, Equatable {
        /// `scheme://host[:port]` of the S3 service, without a path (`https://s3.eu-west-1.amazonaws.com`,
        /// `http://127.0.0.1:9000` for MinIO).
        public var endpoint: String
        /// The bucket objects go to.
        public var bucket: String
        /// The signing region (`us-east-1` for MinIO and most S3 look-alikes, `auto` for Cloudflare R2).
        public var region: String
        /// `https://endpoint/bucket/key` instead of `https://bucket.endpoint/key`: what MinIO, Ceph, moto and
        /// addresses by IP need.
        public var pathStyle: Bool
        /// The object key: `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, `{meta.KEY}`, each value kept to one
        /// path segment.
        public var keyTemplate: PathTemplate
        /// Files of at least this many bytes go up in parts (CreateMultipartUpload); smaller ones in one PutObject.
        public var multipartThreshold: Int64
        /// The part size asked for; grown when a file would need more than 10,000 parts.
        public var partSize: Int64
        /// Parts sent at once for one file (a crash re-sends at most this many parts).
        public var partConcurrency: Int = 2
        /// Where the access key and secret come from.
        public var credentials: S3CredentialSource
        /// What the store's ETags are (`etag`), which decides how an upload is proven.
        public var etags: ETags = .md5

        /// What a store's ETags are.
        public enum ETags: String, Sendable, Equatable, CaseIterable {
            /// The MD5 of the bytes, as AWS makes them by default: each PutObject's and UploadPart's ETag must equal
            /// the MD5 uploadq sent (`Content-MD5`), and a completed upload's the MD5 of its parts' MD5s.
            case md5
            /// Not MD5s (SSE-KMS, SSE-C, some S3-compatible stores): a `HEAD` of the object after the upload must show
            /// its size (and its `x-amz-checksum-sha256`, which uploadq sends with a PutObject, where the store keeps
            /// one).
            case opaque
        }

        /// S3's smallest part (all but the last).
        public static let minimumPartSize: Int64 = 5 << 20
        /// S3's largest part, and its largest single PutObject.
        public static let maximumPartSize: Int64 = 5 << 30
        /// S3's most parts in one upload.
        public static let maximumPartCount: Int64 = 10_000

        /// Settings for `bucket` at `endpoint`; keys `{job_id}-{name}`, parts of 8 MiB from 16 MiB on.
        public init(endpoint: String, bucket: String, region: String = "us-east-1", pathStyle: Bool = true,
                    keyTemplate: PathTemplate = .defaultFileName, multipartThreshold: Int64 = 16 << 20,
                    partSize: Int64 = 8 << 20, credentials: S3CredentialSource = .standard(profile: nil)) {
            self.endpoint = endpoint
            self.bucket = bucket
            self.region = region
            self.pathStyle = pathStyle
            self.keyTemplate = keyTemplate
            self.multipartThreshold = multipartThreshold
            self.partSize = partSize
            self.credentials = credentials
        }

        /// The bucket's address: `endpoint/bucket` path-style, `scheme://bucket.host` otherwise.
        public var bucketURL: String {
            var url = endpoint
            while url.hasSuffix("/") { url.removeLast() }
            if pathStyle {
                url += "/" + bucket
            } else if let scheme = url.range(of: "://") {
                url.insert(contentsOf: bucket + ".", at: scheme.upperBound)
            }
            return url
        }

        /// Whether `name` is a bucket name S3 accepts (3–63 of `a-z 0-9 . -`, starting and ending with a letter or
        /// digit).
        public static func isValidBucketName(_ name: String) -> Bool {
            guard (3...63).contains(name.count), let first = name.first, let last = name.last,
                  first.isASCII, last.isASCII, first.isLetter || first.isNumber, last.isLetter || last.isNumber else {
                return false
            }
            return name.allSatisfy { ($0.isASCII && ($0.isLowercase || $0.isNumber)) || $0 == "." || $0 == "-" }
        }
    }
}

extension Destination {
    /// Where an `s3` destination's access key and secret come from; they are read again for every attempt (so a
    /// rotated key is picked up) and never logged.
    public enum S3CredentialSource: Sendable, Equatable {
        /// Environment variables of the daemon holding the access key, the secret and, optionally, a session token.
        case environment(accessKey: String, secretKey: String, sessionToken: String?)
        /// A profile of an AWS shared credentials file (`aws_access_key_id`, `aws_secret_access_key`,
        /// `aws_session_token`).
        case sharedFile(path: String, profile: String)
        /// What the AWS tools do: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, else the profile
        /// (`profile`, `AWS_PROFILE`, or `default`) of `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`.
        case standard(profile: String?)
    }
}

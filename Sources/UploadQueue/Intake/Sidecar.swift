import Foundation

/// Per-file options written next to a spool file as `NAME.uploadq.json` before `NAME` appears.
///
/// `{"destination": "...", "meta": {...}, "patch": {...}, "priority": N, "on_metered": "..."}`; unknown keys and
/// wrong types are errors, so a typo never silently sends a file to the wrong place.
struct Sidecar: Sendable, Equatable {
    static let suffix = ".uploadq.json"

    var destination: String?
    var meta: [String: String] = [:]
    var patch: PatchTarget?
    var priority: Int?
    var onMetered: String?
    var lane: String?
    var after: [String] = []
    var afterMode: Job.AfterMode?
    var group: String?

    /// The largest sidecar read: a few keys fit in far less, and anything larger is not one.
    static let maximumSize = 64 * 1024

    /// Reads and parses the sidecar at `path`; nil when there is none.
    ///
    /// Whoever writes into the spool writes its sidecars, so the read trusts nothing: it follows no symbolic
    /// link, never blocks on a FIFO, takes only a regular file of at most `maximumSize` bytes, and reads no more
    /// than that even from a file that grows meanwhile.
    static func read(at path: String) throws(SidecarError) -> Sidecar? {
        try readExamined(at: path)?.sidecar
    }

    /// `read(at:)` with the file it read (its inode and owner: what a later rename must still find).
    static func readExamined(at path: String) throws(SidecarError) -> (sidecar: Sidecar, file: FileFingerprint)? {
        guard let (bytes, file) = try readBytes(at: path) else { return nil }
        do {
            return (try Sidecar(json: Data(bytes)), file)
        } catch {
            throw SidecarError(message: "is unusable: \(error.message)")
        }
    }

    /// The bytes of the sidecar at `path`, read as `read(at:)` reads them, with the file they came from; nil when
    /// there is none (or its name would be too long to exist).
    static func readBytes(at path: String) throws(SidecarError) -> (bytes: [UInt8], file: FileFingerprint)? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT || code == ENAMETOOLONG { return nil }
            if code == ELOOP { throw SidecarError(message: "is a symbolic link; write the sidecar itself into the spool") }
            throw SidecarError(message: "cannot be opened (\(String(cString: strerror(code))))")
        }
        defer { close(descriptor) }
        let fingerprint: FileFingerprint
        do {
            fingerprint = try FileFingerprint.of(descriptor: descriptor, path: path)
        } catch {
            throw SidecarError(message: "cannot be examined (\(error.message))")
        }
        guard fingerprint.isRegularFile else {
            throw SidecarError(message: "is a \(fingerprint.typeName); a sidecar is a regular file")
        }
        let tooLarge = SidecarError(message: """
            is larger than \(maximumSize / 1024) KiB; a sidecar holds a few keys
            """)
        guard fingerprint.size <= maximumSize else { throw tooLarge }
        var bytes = [UInt8](repeating: 0, count: maximumSize + 1)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                Foundation.read(descriptor, buffer.baseAddress! + count, buffer.count - count)
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw SidecarError(message: "cannot be read (\(String(cString: strerror(errno))))")
            }
            if got == 0 { break }
            count += got
        }
        guard count <= maximumSize else { throw tooLarge }
        return (Array(bytes[0..<count]), fingerprint)
    }

    /// Parses sidecar JSON; the error text says which key is wrong.
    init(json data: Data) throws(SidecarError) {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data)
        } catch {
            throw SidecarError(message: "not valid JSON (\(Self.describe(error)))")
        }
        guard let root = object as? [String: Any] else { throw SidecarError(message: "must be a JSON object") }
        for (key, value) in root {
            switch key {
            case "destination":
                guard let text = value as? String else { throw SidecarError(message: "\"destination\" must be a string") }
                destination = text
            case "meta":
                guard let table = value as? [String: Any] else { throw SidecarError(message: "\"meta\" must be an object") }
                for (metaKey, metaValue) in table {
                    guard let text = Self.scalarText(metaValue) else {
                        throw SidecarError(message: "meta \"\(metaKey)\" must be a string, number or boolean")
                    }
                    meta[metaKey] = text
                }
            case "patch":
                let target = try Self.patchTarget(value)
                do {
                    try PatchAuthority.check(target)
                } catch {
                    throw SidecarError(message: error.message)
                }
                patch = target
            case "priority":
                guard let integer = Self.integer(value) else {
                    throw SidecarError(message: "\"priority\" must be an integer")
                }
                priority = integer
            case "on_metered":
                guard let text = value as? String, MeteredPolicy(text) != nil else {
                    throw SidecarError(message: "\"on_metered\" must be \"defer\", \"allow\" or \"allow-below:SIZE\"")
                }
                onMetered = text
            case "lane":
                guard let text = value as? String, OrderRule.isValidLaneName(text) else {
                    throw SidecarError(message: "\"lane\" must be a lane's name: 1 to 128 characters, no control character")
                }
                lane = text
            case "after":
                guard let items = value as? [Any], let names = items as? [String], names.count <= 1000 else {
                    throw SidecarError(message: "\"after\" must be an array of at most 1000 job ids or idempotency keys")
                }
                after = names
            case "after_mode":
                guard let text = value as? String, let mode = Job.AfterMode(rawValue: text) else {
                    throw SidecarError(message: "\"after_mode\" must be \"uploaded\" or \"settled\"")
                }
                afterMode = mode
            case "group":
                guard let text = value as? String, OrderRule.isValidGroupName(text) else {
                    throw SidecarError(message: "\"group\" must be a group's name: 1 to 128 characters, no control character or /")
                }
                group = text
            case "source_after_upload":
                throw SidecarError(message: """
                    "source_after_upload" does not apply to spool files: the queue takes them over, and [retention] \
                    uploaded_copies decides what becomes of its copy
                    """)
            default:
                throw SidecarError(message: """
                    unknown key "\(key)" (known: destination, meta, patch, priority, on_metered, lane, after, after_mode, group)
                    """)
            }
        }
    }

    private static func patchTarget(_ value: Any) throws(SidecarError) -> PatchTarget {
        guard let table = value as? [String: Any] else { throw SidecarError(message: "\"patch\" must be an object") }
        guard let url = table["url"] as? String, !url.isEmpty else {
            throw SidecarError(message: "\"patch.url\" is required and must be a string")
        }
        var target = PatchTarget(url: url)
        for (key, item) in table where key != "url" {
            switch key {
            case "method":
                guard let text = item as? String else { throw SidecarError(message: "\"patch.method\" must be a string") }
                target.method = text
            case "body":
                // The body goes out with the `[patch]` token: what it says is the admin's template alone.
                throw SidecarError(message: """
                    "patch.body" is not taken from a sidecar: the body sent is [patch] body, the config's template
                    """)
            case "headers":
                guard let headers = item as? [String: String] else {
                    throw SidecarError(message: "\"patch.headers\" must be an object of strings")
                }
                target.headers = headers
            default:
                throw SidecarError(message: "unknown key \"patch.\(key)\" (known: url, method, headers)")
            }
        }
        return target
    }

    private static func scalarText(_ value: Any) -> String? {
        if let text = value as? String { return text }
        if ContractJSON.isBoolean(value), let flag = value as? Bool { return flag ? "true" : "false" }
        if let number = value as? NSNumber { return number.stringValue }
        if let integer = value as? Int { return String(integer) }
        if let double = value as? Double { return String(double) }
        return nil
    }

    private static func integer(_ value: Any) -> Int? {
        if ContractJSON.isBoolean(value) { return nil }
        if let number = value as? NSNumber { return Int(exactly: number.doubleValue) }
        if let integer = value as? Int { return integer }
        if let double = value as? Double { return Int(exactly: double) }
        return nil
    }

    /// JSON `true`/`false`, however Foundation chose to box it.

    private static func describe(_ error: Error) -> String {
        let text = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
        return text ?? "unparseable"
    }
}

/// A sidecar that cannot be used.
struct SidecarError: Error, Sendable, Equatable {
    var message: String
}

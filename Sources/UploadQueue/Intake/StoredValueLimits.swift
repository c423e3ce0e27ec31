/// The bounds of what a caller stores with a job, whichever door it comes through (the spool, the control API, the
/// CLI, the library): every value the queue keeps for a caller is bounded, so no caller can grow the database, a
/// listing or the daemon's memory past them. Checked by the intake (`check`) and, for a patch, `PatchAuthority`.
///
/// | value | bound |
/// |---|---|
/// | `meta` | 64 keys; a key 1–128 bytes; a value at most 4 KiB; 16 KiB in all |
/// | a lane's, a group's name | 1–128 bytes (`OrderRule`) |
/// | a group's members | 1,000 (its completion carries every member's URL) |
/// | `after` | 1,000 references, each at most 255 bytes |
/// | an idempotency key | 1–255 visible ASCII characters |
/// | a patch | URL 2 KiB; 32 headers of at most 1 KiB each; a body template (the admin's) 16 KiB |
/// | a path | 4 KiB (`PATH_MAX`) |
enum StoredValueLimits {
    static let metaKeys = 64
    static let metaKeyBytes = 128
    static let metaValueBytes = 4 << 10
    static let metaBytes = 16 << 10
    static let afterReferences = 1000
    static let referenceBytes = 255
    static let patchURLBytes = 2 << 10
    static let patchHeaders = 32
    static let patchHeaderBytes = 1 << 10
    static let patchBodyBytes = 16 << 10
    static let pathBytes = 4 << 10
    static let groupMembers = 1000

    /// Refuses metadata past the bounds, naming the bound.
    static func check(meta: [String: String]) throws(UploadQueueError) {
        guard meta.count <= metaKeys else {
            throw UploadQueueError(.invalidArgument, "meta has \(meta.count) keys; at most \(metaKeys)")
        }
        var total = 0
        for (key, value) in meta {
            guard (1...metaKeyBytes).contains(key.utf8.count) else {
                throw UploadQueueError(.invalidArgument, "meta key \"\(SafeText.escaped(String(key.prefix(40))))…\" is "
                    + "\(key.utf8.count) bytes; a key is 1 to \(metaKeyBytes)")
            }
            guard value.utf8.count <= metaValueBytes else {
                throw UploadQueueError(.invalidArgument, "meta \"\(SafeText.escaped(key))\" is \(value.utf8.count) bytes; "
                    + "a value is at most \(metaValueBytes / 1024) KiB")
            }
            total += key.utf8.count + value.utf8.count
        }
        guard total <= metaBytes else {
            throw UploadQueueError(.invalidArgument, "meta is \(total) bytes; at most \(metaBytes / 1024) KiB in all")
        }
    }

    /// Refuses `after` past the bounds.
    static func check(after: [String]) throws(UploadQueueError) {
        guard after.count <= afterReferences else {
            throw UploadQueueError(.invalidArgument, "after names \(after.count) jobs; at most \(afterReferences)")
        }
        if let long = after.first(where: { $0.utf8.count > referenceBytes }) {
            throw UploadQueueError(.invalidArgument, "after \"\(SafeText.escaped(String(long.prefix(40))))…\" is "
                + "\(long.utf8.count) bytes: a job id or an idempotency key is at most \(referenceBytes)")
        }
    }

    /// About what a job's row and its event cost the database: what the free-space guard counts an enqueue as
    /// beside its copy (a job's columns, its indexes, its event; the values a caller gave).
    static func rowBytes(meta: [String: String], patch: PatchTarget?, path: String, after: [String]) -> Int64 {
        let metaBytes = meta.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count + 6 }
        let patchBytes = patch.map { patch in
            patch.url.utf8.count + (patch.body?.utf8.count ?? 0)
                + (patch.headers ?? [:]).reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count + 6 }
        } ?? 0
        return Int64(2048 + metaBytes + patchBytes + 3 * path.utf8.count + after.reduce(0) { $0 + $1.utf8.count + 80 })
    }
}

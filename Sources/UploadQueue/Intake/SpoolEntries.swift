import CUploadQueueSystem
import Foundation

/// The names in the spool directory, read as the bytes they are: a name that is not valid UTF-8 (a file from
/// another system's encoding) is kept apart, to be rejected with a reason rather than decoded into a name that
/// leads nowhere and skipped at every scan.
struct SpoolEntries {
    /// The names that are valid UTF-8.
    var names: [String] = []
    /// The others, as bytes.
    var undecodable: [[UInt8]] = []

    /// Reads `directory`; nil when it cannot be read.
    static func read(_ directory: String) -> SpoolEntries? {
        guard let stream = opendir(directory) else { return nil }
        defer { closedir(stream) }
        var entries = SpoolEntries()
        while let entry = readdir(stream) {
            let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 })
            }
            if bytes == Array(".".utf8) || bytes == Array("..".utf8) { continue }
            if let name = String(validating: bytes, as: UTF8.self) {
                entries.names.append(name)
            } else {
                entries.undecodable.append(bytes)
            }
        }
        return entries
    }

    /// Moves the entry `name` of `directory` to `target` (a folder), under the same name or, when taken, with
    /// `.1`, `.2`… after it; never replaces anything. The name given leaves `room` bytes for a suffix that follows
    /// it there (a reason file's), shortened by the name rule when it would not (`fitted`). Returns the name given
    /// there, or the errno of the failure.
    static func move(_ name: [UInt8], from directory: String, to target: String, room: Int = 0,
                     companions: [[UInt8]] = []) -> Result<[UInt8], POSIXError> {
        let marker = JobID.generate()
        var given = fitted(name, room: room, marker: marker)
        var suffix = 1
        while true {
            // A name whose companions (its reason file, its sidecar) are taken there is taken too: a reason left
            // from an earlier rejection would keep the new one from being written.
            let companionTaken = companions.contains { suffix in
                withPath(given + suffix, in: target) { path in
                    var info = stat()
                    return lstat(path, &info) == 0
                }
            }
            let moved = companionTaken ? -1 : withPath(name, in: directory) { from in
                withPath(given, in: target) { to in uploadq_rename_noreplace(AT_FDCWD, from, AT_FDCWD, to) }
            }
            if moved == 0 { return .success(given) }
            let code = companionTaken ? EEXIST : errno
            guard code == EEXIST || code == ENOTEMPTY, suffix < 1000 else {
                return .failure(POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
            }
            given = fitted(name + Array(".\(suffix)".utf8), room: room, marker: marker)
            suffix += 1
        }
    }

    /// `name`, or when it leaves less than `room` bytes of a file name's 255 its shortened form: by the name rule
    /// (`FileName.fitting`, with `marker` for the job id) when it is UTF-8, else its first bytes and `~marker`.
    static func fitted(_ name: [UInt8], room: Int, marker: JobID) -> [UInt8] {
        let limit = FileName.componentLimit - room
        guard name.count > limit else { return name }
        if let text = String(validating: name, as: UTF8.self) {
            return Array(FileName.fitting(text, limit: limit, jobID: marker).utf8)
        }
        let tail = Array("~\(marker.rawValue)".utf8)
        return Array(name.prefix(max(0, limit - tail.count))) + tail
    }

    /// Calls `body` with `directory/name` as a C string (the name as the bytes it is).
    static func withPath<Value>(_ name: [UInt8], in directory: String,
                                _ body: (UnsafePointer<CChar>) -> Value) -> Value {
        (Array(directory.utf8) + [UInt8(ascii: "/")] + name + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }

    /// Writes `text` to a new file `directory/name` (nothing there is followed or replaced); false when that cannot
    /// be done.
    static func write(_ text: String, to name: [UInt8], in directory: String) -> Bool {
        withPath(name, in: directory) { path in
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else { return false }
            defer { close(descriptor) }
            let bytes = Array(text.utf8)
            // Fsynced before `.rejected/` is: else a power cut can leave the name with nothing in it, a file set
            // aside without its reason (power-cut site `rejected-reason`).
            return Foundation.write(descriptor, bytes, bytes.count) == bytes.count && fsync(descriptor) == 0
        }
    }
}

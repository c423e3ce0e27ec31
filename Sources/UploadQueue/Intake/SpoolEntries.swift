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
    /// `.1`, `.2`… after it; never replaces anything. Returns the name given there, or the errno of the failure.
    static func move(_ name: [UInt8], from directory: String, to target: String) -> Result<[UInt8], POSIXError> {
        let source = Array(directory.utf8) + [UInt8(ascii: "/")] + name
        var given = name
        var suffix = 1
        while true {
            let destination = Array(target.utf8) + [UInt8(ascii: "/")] + given
            let moved = (source + [0]).withUnsafeBufferPointer { from in
                (destination + [0]).withUnsafeBufferPointer { to in
                    from.withMemoryRebound(to: CChar.self) { from in
                        to.withMemoryRebound(to: CChar.self) { to in
                            uploadq_rename_noreplace(AT_FDCWD, from.baseAddress, AT_FDCWD, to.baseAddress)
                        }
                    }
                }
            }
            if moved == 0 { return .success(given) }
            let code = errno
            guard code == EEXIST || code == ENOTEMPTY, suffix < 1000 else {
                return .failure(POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
            }
            given = name + Array(".\(suffix)".utf8)
            suffix += 1
        }
    }
}

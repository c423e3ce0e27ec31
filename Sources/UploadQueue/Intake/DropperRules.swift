import CUploadQueueSystem
import Foundation

/// What a dropper may hand over, whichever door it uses (the spool, the control API): one set of rules.
///
/// A dropper's file must be a regular file of at most `[spool] max_file_size`, stored whole (not sparse), and what
/// comes with it (a sidecar, or the API's equivalent keys) may only narrow what the config allows
/// (`SidecarPolicy`). The door adds what only it can check: the spool, that a file with several names is not
/// another's; the API, that the dropper owns the file and could open it itself (`open(_:as:)`, in the intake, whose
/// descriptor is the one read).
struct DropperRules: Sendable, Equatable {
    let spool: Configuration.Spool
    let options: SidecarPolicy

    init(configuration: Configuration, spool: Configuration.Spool) {
        self.spool = spool
        options = SidecarPolicy(configuration: configuration, spool: spool)
    }

    /// Why the file `name`, as examined, may not come in with `choices`, said of the file (`photo.jpg is …`), or
    /// nil when it may.
    func refusal(of file: FileFingerprint, name: String, choices: Sidecar) -> String? {
        if let why = refusal(of: file, name: name) { return why }
        return options.refusal(of: choices).map { "\(name)'s options \($0)" }
    }

    /// Why the file `name`, as examined, may not come in whatever comes with it, or nil.
    func refusal(of file: FileFingerprint, name: String) -> String? {
        guard file.isRegularFile else {
            let advice = file.isSymbolicLink ? "hand over the file itself, not a link to it" : "only regular files are uploaded"
            return "\(name) is a \(file.typeName); \(advice)"
        }
        if file.size > spool.maxFileSize {
            return """
                \(name) is \(ConfigurationValues.sizeText(file.size)), larger than [spool] max_file_size \
                (\(ConfigurationValues.sizeText(spool.maxFileSize))) that other users' files may have; the admin may \
                raise it
                """
        }
        if file.isSparse {
            return """
                \(name) is sparse: \(ConfigurationValues.sizeText(file.size)) long with only \
                \(ConfigurationValues.sizeText(file.allocatedBytes)) of it on disk (a file of holes, as `truncate` \
                makes); a photo or a recording is stored whole. Write the file's bytes and hand it over again
                """
        }
        return nil
    }

    /// Opens `path` for reading as `access` would reach it (`uploadq_open_as_user`: every directory on the way
    /// searchable by it, the file readable by it, by the modes and ACLs the kernel applies). The daemon's own view
    /// of the path counts for nothing: a file of the dropper's in a folder it cannot enter is not its to hand over.
    /// The descriptor is the caller's to close.
    static func open(_ path: String, as access: DropperAccess) throws(UploadQueueError) -> Int32 {
        let descriptor = access.groups.withUnsafeBufferPointer { groups in
            uploadq_open_as_user(path, access.uid, access.gid, groups.baseAddress, Int32(groups.count),
                                 access.groupsUncertain.rawValue)
        }
        guard descriptor >= 0 else {
            let code = errno
            if code == EREMOTE {
                // Refused before anything on it was asked: its server (a user's FUSE mount) could hold the walk.
                throw UploadQueueError(.invalidArgument, "lies on a network or FUSE file system; copy it to a local "
                    + "disk and hand that over", path: path)
            }
            let reason = code == EACCES ? "you may not open it yourself (a folder on the way, or the file, is closed "
                + "to you)" : String(cString: strerror(code))
            throw UploadQueueError(.forbidden, "is not a file you can open: \(reason)", path: path, cause: reason)
        }
        return descriptor
    }
}

/// Who a dropper is, for the checks made as it, and the rules its files are held to.
struct DropperAccess: Sendable, Equatable {
    var uid: uid_t
    var gid: gid_t
    /// Its supplementary groups.
    var groups: [gid_t]
    /// Which groups not listed it may be in after all.
    var groupsUncertain: ControlPeer.GroupUncertainty = .none
    var rules: DropperRules
}

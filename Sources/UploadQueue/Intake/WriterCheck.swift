import CUploadQueueSystem

/// Whether a spool file is still being written, asked of the kernel rather than guessed from time: a writer that
/// keeps a file open keeps it out of the queue however long it pauses.
///
/// A read lease answers first (refused while any process has the file open for writing; the unit grants
/// `CAP_LEASE` for files the droppers own). Where leases give no answer, `/proc` is looked through; where that
/// cannot see every process, the spool's own events decide (a file modified and not closed since).
enum WriterCheck {
    /// Whether `path` is open for writing now; `eventsSayOpen` is what inotify last said.
    static func isBeingWritten(_ path: String, eventsSayOpen: Bool) -> Bool {
        decide(lease: uploadq_open_for_writing(path), scan: { uploadq_writer_scan(path) }, eventsSayOpen: eventsSayOpen)
    }

    /// The decision, from the lease's answer (1 open for writing, 0 not, -1 no answer), the `/proc` scan's (run
    /// only when needed: 1 a writer, 0 none among all processes, 2 none among those visible, -1 failed) and the
    /// events'.
    static func decide(lease: Int32, scan: () -> Int32, eventsSayOpen: Bool) -> Bool {
        switch lease {
        case 1: return true
        case 0: return false
        default:
            switch scan() {
            case 1: return true
            case 0: return false
            default: return eventsSayOpen
            }
        }
    }

    /// How long a file must stay unchanged before it is taken. On a network file system writers on other
    /// machines are invisible to events, leases and `/proc`, so a file not seen renamed in waits
    /// `networkQuietPeriod` (when longer than the quiet period).
    static func requiredQuiet(quietPeriod: Duration, networkQuietPeriod: Duration, onNetworkFileSystem: Bool,
                              renamedIn: Bool) -> Duration {
        onNetworkFileSystem && !renamedIn ? max(quietPeriod, networkQuietPeriod) : quietPeriod
    }
}

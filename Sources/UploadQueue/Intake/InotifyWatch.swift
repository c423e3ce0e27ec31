import CUploadQueueSystem
import Dispatch
import Foundation

/// An inotify watch on one directory, delivering decoded events as an `AsyncStream`.
///
/// The descriptor is non-blocking and read from a dispatch source, so no thread blocks in `read(2)`.
final class InotifyWatch: Sendable {
    /// What inotify reported, reduced to what the spool needs.
    enum Event: Sendable, Equatable {
        /// A writer created the name: it is open for writing until `closedWrite`.
        case created(String)
        case modified(String)
        case closedWrite(String)
        /// The name appeared by rename (rsync style, `mv`): complete from the start.
        case movedIn(String)
        /// The kernel's queue overflowed: events were lost, rescan.
        case overflow
        /// A name that is not valid UTF-8 appeared: the scan, which reads names as bytes, deals with it.
        case undecodableName
        /// The directory itself went away or the watch was removed.
        case watchLost
    }

    let events: AsyncStream<Event>
    /// Dispatch sources are thread-safe; Swift does not know it.
    nonisolated(unsafe) private let source: DispatchSourceRead

    /// Watches `directory`; throws when inotify is unavailable (then the caller polls instead).
    init(directory: String) throws(UploadQueueError) {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { throw .system("inotify_init1", path: directory) }
        let mask = uploadq_in_close_write() | uploadq_in_moved_to() | uploadq_in_create() | uploadq_in_modify()
            | uploadq_in_delete_self() | uploadq_in_move_self() | uploadq_in_onlydir()
        guard inotify_add_watch(descriptor, directory, mask) >= 0 else {
            let error = UploadQueueError.system("inotify_add_watch", path: directory)
            close(descriptor)
            throw error
        }
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .unbounded)
        events = stream
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: DispatchQueue(label: "uploadq.inotify"))
        source.setEventHandler {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 8)
            defer { buffer.deallocate() }
            while true {
                let count = read(descriptor, buffer.baseAddress, buffer.count)
                if count <= 0 { break }
                var offset = 0
                var record = uploadq_inotify_record()
                while uploadq_inotify_record_at(buffer.baseAddress, count, offset, &record) == 0 {
                    offset += record.record_length
                    guard let name = String(validatingCString: record.name) else {
                        continuation.yield(.undecodableName)
                        continue
                    }
                    for event in Self.decode(mask: record.mask, name: name) {
                        continuation.yield(event)
                    }
                }
            }
        }
        source.setCancelHandler {
            close(descriptor)
            continuation.finish()
        }
        source.resume()
    }

    deinit {
        source.cancel()
    }

    private static func decode(mask: UInt32, name: String) -> [Event] {
        var events: [Event] = []
        if mask & uploadq_in_q_overflow() != 0 { events.append(.overflow) }
        if mask & (uploadq_in_delete_self() | uploadq_in_move_self() | uploadq_in_ignored()) != 0 {
            events.append(.watchLost)
        }
        guard !name.isEmpty else { return events }
        if mask & uploadq_in_create() != 0 {
            events.append(mask & uploadq_in_isdir() != 0 ? .movedIn(name) : .created(name))
        }
        if mask & uploadq_in_modify() != 0 { events.append(.modified(name)) }
        if mask & uploadq_in_moved_to() != 0 { events.append(.movedIn(name)) }
        if mask & uploadq_in_close_write() != 0 { events.append(.closedWrite(name)) }
        return events
    }
}

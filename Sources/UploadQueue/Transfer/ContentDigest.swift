import CUploadQueueSystem
import Dispatch
import Synchronization

/// The SHA-256 of a file taken while it is uploaded, for a job that hashes while sending.
///
/// Two ways, one result. An upload that reads its file in order (a PUT, a POST, tus chunks, a copy into a
/// directory) is hashed from the bytes it reads (`take`), in one pass, on the thread that reads them: on a 1 GiB
/// PUT that took less CPU and less time than a thread of its own reading beside libcurl (measured on 2 cores,
/// where the second read and the thread's share of the CPU cost more than they overlapped). An S3 multipart
/// upload, whose parts go several at once and in any order, hashes beside them (`hashBeside`). Reads may come in
/// any order (libcurl rewinds a body to send it again, a resumed upload starts past what an earlier process
/// sent): only bytes that extend the hashed prefix are taken, and `finish` reads whatever was not, so the digest
/// is always that of the whole file.
final class ContentDigest: Sendable {
    /// A libcrypto SHA-256 context; touched only under the lock.
    private struct Context: @unchecked Sendable {
        let pointer: UnsafeMutableRawPointer
    }

    private struct State {
        let context: Context
        /// How many bytes from the start are hashed.
        var hashedUpTo: Int64 = 0
        /// The hex digest once finished (asked for again, it is the same).
        var finished: String?
        /// Set when the thread beside is done (the whole file, or stopped by an error it leaves to `finish`).
        var besideDone = false
        /// Who waits for the thread beside.
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state: Mutex<State>
    /// Whether a thread hashes beside the upload; `take` then leaves the bytes to it, without waiting for the lock
    /// the thread holds while it hashes.
    private let beside = Atomic<Bool>(false)
    /// Set when the task that waits for a catch-up is cancelled (a stop, a cancel, a link change): the read stops
    /// at its next block instead of going through gigabytes first.
    private let stopped = Atomic<Bool>(false)

    init() {
        guard let pointer = uploadq_sha256_new() else {
            preconditionFailure("libcrypto could not create a SHA-256 context (out of memory)")
        }
        state = Mutex(State(context: Context(pointer: pointer)))
    }

    deinit {
        // Finishing frees the context.
        state.withLock { state in
            if state.finished == nil { uploadq_sha256_free(state.context.pointer) }
        }
    }

    /// Whether a thread hashes the file beside the upload (`hashBeside`).
    var isHashingBeside: Bool { beside.load(ordering: .acquiring) }

    /// How many bytes from the start of the file are hashed.
    var hashedUpTo: Int64 { state.withLock { $0.hashedUpTo } }

    /// Takes `bytes`, read from the file at `offset`, as far as they extend the hashed prefix (unless a thread
    /// hashes beside the upload).
    func take(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        guard !beside.load(ordering: .acquiring) else { return }
        state.withLock { append(bytes, at: offset, to: &$0) }
    }

    /// Hashes the file on a thread of its own while the upload reads it too (from the page cache, where the
    /// other read has just put it); `finish` waits for it. It stops early when `source` is released (the
    /// upload ended) or a read fails (`finish` then reads again, and says what failed).
    func hashBeside(_ source: SourceFile, size: Int64) {
        guard state.withLock({ $0.finished == nil }),
              beside.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        weak let weakSource = source
        DispatchQueue.global(qos: .utility).async {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
            defer { buffer.deallocate() }
            while let source = weakSource {
                let position = self.hashedUpTo
                guard position < size else { break }
                let want = Int(min(Int64(buffer.count), size - position))
                let room = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                guard let count = try? source.readUnhashed(into: room, at: position), count > 0 else { break }
                let read = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
                self.state.withLock { self.append(read, at: position, to: &$0) }
            }
            let waiter = self.state.withLock { state in
                state.besideDone = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }

    /// Waits for the thread beside the upload, when there is one.
    func waitForBeside() async {
        await withCheckedContinuation { continuation in
            let running = beside.load(ordering: .acquiring)
            let ready = state.withLock { state in
                if !running || state.besideDone { return true }
                state.waiter = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Hashes the part of `bytes` (read at `offset`) that extends the hashed prefix.
    private func append(_ bytes: UnsafeRawBufferPointer, at offset: Int64, to state: inout State) {
        let end = offset + Int64(bytes.count)
        guard state.finished == nil, offset <= state.hashedUpTo, end > state.hashedUpTo else { return }
        let skip = Int(state.hashedUpTo - offset)
        if let base = bytes.baseAddress {
            _ = uploadq_sha256_update(state.context.pointer, base + skip, bytes.count - skip)
        }
        state.hashedUpTo = end
    }

    /// Stops a catch-up under way, and any later one (`interrupted`): the upload it serves is ending.
    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    /// `catchUp` on a thread of its own (possibly gigabytes: not on one of Swift's cooperative threads), stopped
    /// when the calling task is cancelled.
    func catchUpAside(to offset: Int64, from source: SourceFile) async throws(TransferFailure) {
        let result = await withTaskCancellationHandler {
            await BlockingWork.runResult { () throws(TransferFailure) in try self.catchUp(to: offset, from: source) }
        } onCancel: {
            self.stop()
        }
        try result.get()
    }

    /// Hashes the file's bytes from where the prefix ends up to `offset` (what an earlier process sent before a
    /// resume), reading them from `source`.
    func catchUp(to offset: Int64, from source: SourceFile) throws(TransferFailure) {
        guard state.withLock({ $0.finished == nil && $0.hashedUpTo < offset }) else { return }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            if stopped.load(ordering: .acquiring) { throw .interrupted }
            let (position, finished) = state.withLock { ($0.hashedUpTo, $0.finished != nil) }
            guard !finished, position < offset else { return }
            let want = Int(min(Int64(buffer.count), offset - position))
            let count = try source.readUnhashed(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]),
                                                at: position)
            if count == 0 {
                throw .permanent("source-changed", "source changed: \(source.path) ended at \(position) bytes")
            }
            state.withLock { append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: position, to: &$0) }
        }
    }

    /// The lowercase hex digest of the file's first `size` bytes, reading from `source` what was not hashed yet
    /// (after the thread beside the upload, if any, is done).
    func finish(size: Int64, from source: SourceFile) async throws(TransferFailure) -> String {
        await waitForBeside()
        if state.withLock({ $0.finished == nil && $0.hashedUpTo < size }) {
            // What the upload did not read (a resume's prefix, an S3 PutObject's whole file).
            try await catchUpAside(to: size, from: source)
        }
        let hex: String? = state.withLock { state in
            if let finished = state.finished { return finished }
            guard state.hashedUpTo == size else { return nil }
            var digest = [UInt8](repeating: 0, count: 32)
            _ = uploadq_sha256_finish(state.context.pointer, &digest)  // frees the context
            state.finished = SHA256Digest.hex(digest)
            return state.finished
        }
        guard let hex else {
            throw .permanent("source-changed", "source changed: \(source.path) is longer than its \(size) bytes")
        }
        return hex
    }
}

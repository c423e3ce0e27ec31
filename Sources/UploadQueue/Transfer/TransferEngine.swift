import CCurlShim
import CUploadQueueSystem
import Foundation
import Synchronization

/// Runs HTTP exchanges through one long-lived libcurl multi handle on its own thread, with an async/await API.
///
/// The thread loops over `curl_multi_perform` and `curl_multi_poll`; callers hand requests over through a locked
/// inbox and `curl_multi_wakeup`. Keeping one multi handle keeps its connection cache (and HTTP/2 multiplexing)
/// across chunks, jobs and destinations. Bodies are read from disk while they are sent; a shared send-rate cap is
/// split evenly over the paced uploads running at the moment.
final class TransferEngine: Sendable {
    private let inbox = EngineInbox()
    private let multi: MultiHandle
    /// Body bytes sent per `TransferOptions.trafficLabel`.
    let traffic = TrafficCounter()

    /// Starts the engine thread.
    init() {
        TransferEngine.initializeOnce()
        multi = MultiHandle()
        let loop = EngineLoop(inbox: inbox, multi: multi)
        let thread = Thread {
            uploadq_thread_set_context("uploadq.transfer-engine")
            loop.run()
        }
        thread.name = "uploadq.transfer-engine"
        thread.start()
    }

    deinit {
        shutdown()
    }

    /// Sends `request` and returns the server's response, whatever its status; throws only when there is none.
    ///
    /// Cancelling the calling task aborts the exchange at once (through libcurl's progress callback).
    /// `progress` receives the request body bytes sent so far, on the engine thread: keep it cheap.
    func perform(_ request: HTTPRequest, progress: (@Sendable (Int64) -> Void)? = nil) async throws(TransferError)
        -> HTTPResponse
    {
        let transfer = EasyTransfer(request: request, progress: progress, traffic: traffic)
        let multi = self.multi
        let inbox = self.inbox
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HTTPResponse, TransferError>, Never>) in
                transfer.continuation = continuation
                switch inbox.submit(transfer) {
                case .asleep:
                    multi.wakeUp()
                case .awake:
                    // The engine takes it at its next turn, before it waits again: no wake-up (a write to
                    // libcurl's socket pair, and a read and a turn more of the loop) is needed.
                    break
                case .closed:
                    transfer.continuation = nil
                    continuation.resume(returning: .failure(TransferError(code: .cancelled,
                        message: "the transfer engine has stopped", curlCode: nil)))
                }
            }
        } onCancel: {
            transfer.cancel()
            multi.wakeUp()
        }
        return try result.get()
    }

    /// Sets the send-rate cap shared by all paced uploads, in bytes per second (0 = unlimited).
    func setSendCap(_ bytesPerSecond: Int64) {
        inbox.sendCap.store(max(0, bytesPerSecond), ordering: .relaxed)
        multi.wakeUp()
    }

    /// Whether the engine thread went round its loop within the last five seconds (for the systemd watchdog).
    var isAlive: Bool { monotonicMilliseconds() - inbox.heartbeat.load(ordering: .relaxed) < 5_000 }

    /// Aborts every exchange in flight and stops the thread.
    func shutdown() {
        inbox.close()
        multi.wakeUp()
    }

    private static let initialized: Bool = {
        // Before any thread uses libcurl; SIGPIPE on a dead connection must not kill the process.
        signal(SIGPIPE, SIG_IGN)
        return curl_global_init(uploadq_curl_global_default()) == CURLE_OK
    }()

    private static func initializeOnce() {
        _ = initialized
    }
}

/// The libcurl multi handle, shared by the engine (for wake-ups) and its thread; freed with the last reference.
final class MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer

    init() {
        pointer = curl_multi_init()
        _ = uploadq_curl_multi_setopt_long(pointer, CURLMOPT_PIPELINING, uploadq_curl_pipe_multiplex())
    }

    /// Interrupts `curl_multi_poll`; safe from any thread.
    func wakeUp() {
        _ = curl_multi_wakeup(pointer)
    }

    deinit {
        curl_multi_cleanup(pointer)
    }
}

/// Requests waiting for the engine thread, the shutdown flag and the shared send cap.
final class EngineInbox: Sendable {
    private struct State {
        var waiting: [EasyTransfer] = []
        var closed = false
        /// The engine thread found nothing waiting and waits in `curl_multi_poll` (or is about to): a new request
        /// must wake it.
        var asleep = false
    }

    /// What became of a request handed over.
    enum Submitted {
        /// Queued; the engine thread waits, and must be woken up.
        case asleep
        /// Queued; the engine thread is running and takes it before it waits again.
        case awake
        /// Refused: the engine is shutting down.
        case closed
    }

    private let state = Mutex(State())
    let sendCap = Atomic<Int64>(0)
    /// When the engine thread last went round its loop (milliseconds of the monotonic clock); it goes round at
    /// least once a second.
    let heartbeat = Atomic<Int64>(monotonicMilliseconds())

    /// Queues a transfer, unless the engine is shutting down; says whether its thread must be woken up.
    func submit(_ transfer: EasyTransfer) -> Submitted {
        state.withLock { state in
            guard !state.closed else { return .closed }
            state.waiting.append(transfer)
            return state.asleep ? .asleep : .awake
        }
    }

    /// Called by the engine thread before it waits: true when nothing waits, and from now on a request handed
    /// over wakes it (`submit` says so); false when a request came meanwhile (it goes round at once instead).
    func goingToWait() -> Bool {
        state.withLock { state in
            state.asleep = state.waiting.isEmpty && !state.closed
            return state.asleep
        }
    }

    func close() {
        state.withLock { $0.closed = true }
    }

    /// Takes the queued transfers; says whether the engine should stop.
    func take() -> (transfers: [EasyTransfer], closed: Bool) {
        state.withLock { state in
            defer { state.waiting.removeAll() }
            state.asleep = false
            return (state.waiting, state.closed)
        }
    }
}

/// The engine thread's side: owns the easy handles of the exchanges in flight.
final class EngineLoop: @unchecked Sendable {
    private let inbox: EngineInbox
    private let multi: MultiHandle
    private var active: [UnsafeMutableRawPointer: EasyTransfer] = [:]
    private var appliedCap: (cap: Int64, count: Int) = (0, 0)

    init(inbox: EngineInbox, multi: MultiHandle) {
        self.inbox = inbox
        self.multi = multi
    }

    func run() {
        while true {
            let (incoming, closed) = inbox.take()
            for transfer in incoming { start(transfer) }
            // A cancelled exchange leaves at once, even while libcurl holds it back for the rate limit (when no
            // progress callback would run).
            for transfer in active.values where transfer.isCancelled {
                finish(transfer, .failure(TransferError(code: .cancelled, message: "cancelled", curlCode: nil)))
            }
            if closed {
                for transfer in Array(active.values) {
                    finish(transfer, .failure(TransferError(code: .cancelled, message: "the transfer engine stopped",
                                                            curlCode: nil)))
                }
                return
            }
            applySendCap(force: !incoming.isEmpty)
            var running: Int32 = 0
            _ = curl_multi_perform(multi.pointer, &running)
            collectFinished()
            // A body that began or ended changes the shares.
            if active.values.contains(where: \.sendingChanged) {
                for transfer in active.values { transfer.sendingChanged = false }
                applySendCap(force: true)
            }
            // Uploads paused for the cap go on once their bucket holds a read; the loop wakes up for the first.
            var timeout: Int32 = 1000
            let now = ContinuousClock.now
            for transfer in active.values where transfer.isPausedForCap {
                let wait = transfer.pacer?.wait(now: now) ?? .zero
                if wait == .zero {
                    transfer.resumeForCap()
                    timeout = 0
                } else {
                    timeout = min(timeout, Int32(min(1000, max(1, wait.milliseconds))))
                }
            }
            var ready: Int32 = 0
            inbox.heartbeat.store(monotonicMilliseconds(), ordering: .relaxed)
            // (A request that came since the take goes at once.)
            if inbox.goingToWait() { _ = curl_multi_poll(multi.pointer, nil, 0, timeout, &ready) }
        }
    }

    private func start(_ transfer: EasyTransfer) {
        if transfer.isCancelled {
            transfer.complete(.failure(TransferError(code: .cancelled, message: "cancelled", curlCode: nil)))
            return
        }
        guard let handle = transfer.makeHandle(capped: inbox.sendCap.load(ordering: .relaxed) > 0) else {
            transfer.complete(.failure(TransferError(code: .other, message: "libcurl could not make a handle", curlCode: nil)))
            return
        }
        active[handle] = transfer
        if transfer.isPacedUpload { transfer.pacer = SendPacer() }
        noteSharers()
        let added = curl_multi_add_handle(multi.pointer, handle)
        if added != CURLM_OK {
            finish(transfer, .failure(TransferError(code: .other,
                message: "libcurl refused the transfer: \(String(cString: curl_multi_strerror(added)))", curlCode: nil)))
        }
    }

    private func collectFinished() {
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi.pointer, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                  let transfer = active[handle] else { continue }
            let code = uploadq_curl_message_result(message)
            finish(transfer, transfer.outcome(code))
        }
    }

    private func finish(_ transfer: EasyTransfer, _ result: Result<HTTPResponse, TransferError>) {
        if let handle = transfer.handle {
            _ = curl_multi_remove_handle(multi.pointer, handle)
            active[handle] = nil
        }
        transfer.releaseHandle()
        transfer.complete(result)
        noteSharers()
        applySendCap(force: true)
    }

    /// Tells each exchange in flight how many share the link with it (for its rate floor).
    private func noteSharers() {
        for transfer in active.values { transfer.setSharers(active.count) }
    }

    /// Splits the shared cap evenly over the paced uploads sending their bodies: each reads its body through a
    /// bucket of its share (and its rate floor judges it by that share). One that has not begun its body gets the
    /// share it will have when it does; the split is made again when it begins, and when a body ends.
    private func applySendCap(force: Bool) {
        let cap = inbox.sendCap.load(ordering: .relaxed)
        let paced = active.values.filter(\.isPacedUpload)
        let sending = paced.filter(\.isSendingBody).count
        guard force || cap != appliedCap.cap || sending != appliedCap.count else { return }
        appliedCap = (cap, sending)
        // At least 1 KiB/s each, so a share never falls below what the stall detector takes for a dead link.
        let share = cap > 0 && !paced.isEmpty ? max(cap / Int64(max(sending, 1)), 1024) : 0
        for transfer in paced {
            transfer.setSendSpeed(share)
            transfer.pacer?.setRate(share)
        }
    }
}

/// Milliseconds of the monotonic clock (for heartbeats).
func monotonicMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

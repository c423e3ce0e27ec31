import Foundation
import Logging
import Synchronization

extension TransferContext {
    /// The context of one attempt run by the scheduler: the link and constraint checks before each chunk, and
    /// progress written to the queue and sent to listeners.
    ///
    /// Progress the database cannot take (a full disk) does not stop the transfer: the server has the bytes, and
    /// the end of the transfer is recorded (or kept until it can be) with everything it needs. Only a crash in the
    /// meantime costs the progress, and the next attempt asks the server where it stands.
    static func recording(job: Job, attempt: Int, store: QueueStore, events: EventHub, monitor: LinkMonitor,
                          limiter: BandwidthLimiter, gauge: ConstraintGauge? = nil,
                          power: PowerRequirement = .any, destination: Destination?,
                          logger: Logger) -> TransferContext {
        let unrecorded = ProgressLoss(logger: logger, job: job)
        let meter = TransferMeter(start: job.bytesConfirmed)
        // Whether the row holds a resume record this attempt may still have to replace or clear.
        let storesResumeState = Atomic<Bool>(job.resumeState != nil)
        return TransferContext(
            job: job,
            limiter: limiter,
            checkConstraints: { () throws(TransferFailure) in
                guard let destination else { return }
                let link = monitor.status(for: destination)
                if let reason = LinkPolicy.waitingReason(for: job, destination: destination, link: link) {
                    throw TransferFailure(.interrupted, code: "link",
                        "stopped before the next chunk: the link is \(link.linkClass.rawValue) (\(reason.rawValue)); "
                        + "it resumes from its confirmed offset")
                }
                // The power or a window (the scheduler asked it to stop), or the metered budget spent.
                let ignoresBudget = job.onMetered.map { $0 == "always" } ?? destination.onMetered.ignoresBudget
                try gauge?.check(job.id, requirement: power,
                                 metered: destination.isNetwork && link.linkClass == .metered,
                                 ignoresBudget: ignoresBudget)
            },
            resumed: { offset throws(TransferFailure) in
                meter.restart(at: offset)
                // The claim wrote this offset already (the attempt's start, the job's confirmed bytes).
                guard offset != job.bytesConfirmed else { return }
                await Self.offPool {
                    do { try store.recordResumeOffset(job.id, attempt: attempt, offset: offset) } catch {
                        unrecorded.note(error, "the resume offset")
                    }
                }
            },
            confirmed: { bytes, resumeState throws(TransferFailure) in
                // The whole file, with no resume record to write or clear: the end of the transfer records it in
                // the same transaction that marks the job uploaded (one commit less per file). A crash before it
                // loses nothing that a resume could use.
                let final = bytes == job.size && resumeState == nil && !storesResumeState.load(ordering: .relaxed)
                if !final {
                    let rate = meter.rate(at: bytes)
                    await Self.offPool {
                        do {
                            try store.recordProgress(job.id, bytesConfirmed: bytes, resumeState: resumeState, rate: rate)
                            if resumeState != nil { storesResumeState.store(true, ordering: .relaxed) }
                        } catch {
                            unrecorded.note(error, "progress")
                        }
                    }
                }
                meter.recordConfirmed(bytes)
                events.emit(.progress(job.id, confirmed: bytes, sent: meter.sent, size: job.size))
            },
            sent: { bytes in
                if meter.recordSent(bytes) {
                    events.emit(.progress(job.id, confirmed: meter.confirmed, sent: meter.sent, size: job.size))
                }
            },
            forgetResumeState: { () throws(TransferFailure) in
                meter.restart(at: 0)
                await Self.offPool {
                    do {
                        try store.clearResumeState(job.id)
                        storesResumeState.store(false, ordering: .relaxed)
                    } catch {
                        unrecorded.note(error, "the end of the remote upload")
                    }
                }
            })
    }

    /// Runs a write of the attempt's progress (a commit with `synchronous = FULL`) off Swift's shared threads: the
    /// uploaders call these closures from their tasks.
    private static func offPool(_ write: @escaping @Sendable () -> Void) async {
        _ = await BlockingWork.runResult { () throws(Never) in write() }
    }
}

/// Notes, once per transfer, that its progress could not be recorded (the transfer goes on).
private final class ProgressLoss: Sendable {
    private let logger: Logger
    private let job: Job
    private let told = Atomic<Bool>(false)

    init(logger: Logger, job: Job) {
        self.logger = logger
        self.job = job
    }

    func note(_ error: any Error, _ what: String) {
        guard !told.exchange(true, ordering: .relaxed) else { return }
        logger.warning("cannot record \(what) (the transfer goes on; its end is recorded once the queue can be written): \(error)",
                       metadata: ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"])
    }
}

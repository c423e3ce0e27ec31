/// The parts of this process's runner that the facade steers while the queue's services run: a cancel reaches the
/// scheduler, `status` reads the running link monitor, the watchdog asks the engine whether it goes round.
///
/// The facade holds these, never the runtime that assembled them: the runtime depends on the facade (the control
/// API answers through it), not the other way round.
struct RunnerParts: Sendable {
    let scheduler: Scheduler
    let monitor: LinkMonitor
    let engine: TransferEngine
}

import Foundation
import Testing
@testable import UploadQueue

/// The scheduler loop's wake-up: level-triggered, never lost, and a wait returns for a signal, a timeout or a cancel.
struct WakeSignalTests {
    @Test("a signal sent before the wait is kept: the wait returns at once, and only once")
    func signalBeforeWait() async {
        let wake = WakeSignal()
        wake.signal()
        wake.signal()
        let clock = ContinuousClock()
        let first = await clock.measure { await wake.wait(timeout: .seconds(3600)) }
        #expect(first < .seconds(10), "a kept signal returned after \(first)")
        // Two signals before one wait are one wake-up: the next wait waits for its timeout.
        let second = await clock.measure { await wake.wait(timeout: .milliseconds(200)) }
        #expect(second >= .milliseconds(200), "\(second)")
    }

    @Test("a wait returns for a signal sent while it waits, and for its task's cancel")
    func signalOrCancelDuringWait() async {
        let wake = WakeSignal()
        let clock = ContinuousClock()
        let signalled = Task { await clock.measure { await wake.wait(timeout: .seconds(3600)) } }
        try? await Task.sleep(for: .milliseconds(50))
        wake.signal()
        #expect(await signalled.value < .seconds(10))
        let cancelled = Task { await clock.measure { await wake.wait(timeout: .seconds(3600)) } }
        try? await Task.sleep(for: .milliseconds(50))
        cancelled.cancel()
        #expect(await cancelled.value < .seconds(10))
    }
}

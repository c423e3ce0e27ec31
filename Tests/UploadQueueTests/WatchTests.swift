import Foundation
import Testing
@testable import UploadQueue

/// `uploadq watch`: redrawn in place with progress bars in a pseudo-terminal (through `script`), plain lines
/// through a pipe, and an end of its own with `--until-idle`.
@Suite(.serialized)
struct WatchTests {
    @Test("in a terminal: bars with percent, rate and ETA for the active transfer, redrawn in place")
    func terminalView() async throws {
        let sandbox = try Sandbox(bandwidth: 1 << 20)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeRandomFile(sandbox.root + "/slow.mov", size: 4 << 20),
                                           to: "default")
        _ = try await running.wait(id) { $0.state == .uploading && $0.bytesConfirmed > 0 }
        let command = "\(BinaryRunner.path) watch --count 5 --interval 0.4 --config \(sandbox.configPath)"
        let output = try await BinaryRunner.run(["script", "-qfec", command, "/dev/null"], executable: "/usr/bin/script")
        await running.stop()
        #expect(output.status == 0, "\(output.stderr)")
        let text = output.stdout
        #expect(text.contains("\u{1B}[2K"), "each line is cleared before it is written")
        #expect(text.range(of: "\u{1B}\\[[0-9]+F", options: .regularExpression) != nil,
                "the cursor goes back up: the view is redrawn in place")
        #expect(text.contains("slow.mov") && text.contains("█") && text.contains("%"), "\(text.suffix(600))")
        #expect(text.contains("ETA"), "\(text.suffix(600))")
        #expect(text.contains("daemon pid") && text.contains("1 uploading"))
        #expect(text.contains("\u{1B}[?25h"), "the cursor is shown again at the end")
    }

    @Test("through a pipe: plain lines, no escape codes; --until-idle ends it")
    func plainView() async throws {
        let sandbox = try Sandbox()
        let (job, _) = try await sandbox.uploadOne("done.jpg", size: 1000, seed: 95, to: "default")
        #expect(job.state == .uploaded)
        let output = try await BinaryRunner.run(["watch", "--until-idle", "--interval", "0.1", "--config", sandbox.configPath])
        #expect(output.status == 0)
        #expect(!output.stdout.contains("\u{1B}"))
        #expect(output.stdout.contains("jobs    0 pending · 0 uploading · 1 uploaded · 0 failed"), "\(output.stdout)")
        #expect(output.stdout.hasPrefix("--- "))
    }
}

import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// Runs the real `uploadq` binary built by `swift build` / `swift test`.
enum BinaryRunner {
    /// The binary: `$UPLOADQ_BINARY`, else `.build/debug/uploadq` of this package. Missing → the test fails.
    static var path: String {
        if let explicit = ProcessInfo.processInfo.environment["UPLOADQ_BINARY"] { return explicit }
        return ConfigurationTests.repositoryRoot + "/.build/debug/uploadq"
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String

        /// stdout parsed as JSON.
        func json() throws -> Any {
            try JSONSerialization.jsonObject(with: Data(stdout.utf8))
        }
    }

    /// Runs `uploadq enqueue ARGS` for one file and returns the job id it printed; a failed run is an issue of the
    /// calling test, with the command's stderr.
    static func enqueue(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> JobID {
        let enqueued = try run(["enqueue"] + arguments)
        #expect(enqueued.status == 0, "\(enqueued.stderr)", sourceLocation: sourceLocation)
        return try #require(JobID(enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                            sourceLocation: sourceLocation)
    }

    /// Runs `uploadq ARGS` (or another `executable`) to completion in `directory`.
    static func run(_ arguments: [String], in directory: String? = nil, environment: [String: String] = [:],
                    executable: String? = nil) throws -> Output {
        let program = executable ?? path
        #expect(FileManager.default.isExecutableFile(atPath: program), "build the uploadq binary first: \(program)")
        var env = ProcessInfo.processInfo.environment
        env["UPLOADQ_CONFIG"] = nil
        env.merge(environment) { $1 }
        let argv = executable == nil ? [program] + arguments : arguments
        let (status, stdout, stderr) = try ChildProcess.run(argv, executable: program, directory: directory, environment: env)
        return Output(status: status, stdout: String(decoding: stdout, as: UTF8.self),
                      stderr: String(decoding: stderr, as: UTF8.self))
    }
}

extension Sandbox {
    /// Runs `uploadq daemon --exit-when-idle` on this sandbox to the end (at most `limit` seconds: a daemon that
    /// does not finish fails the test instead of hanging the run); returns its output.
    @discardableResult
    func drain(limit: Int = 60) throws -> BinaryRunner.Output {
        let output = try BinaryRunner.run(["timeout", "\(limit)", BinaryRunner.path, "daemon", "--exit-when-idle",
                                           "--config", configPath], executable: "/usr/bin/timeout")
        #expect(output.status == 0, "daemon --exit-when-idle: status \(output.status)\n\(output.stderr.suffix(2000))")
        return output
    }
}

/// A running `uploadq daemon`, logging to a file in the sandbox.
final class DaemonProcess: Sendable {
    let child: ChildProcess
    let logPath: String

    init(sandbox: Sandbox, name: String = "daemon", environment: [String: String] = [:], arguments: [String] = []) throws {
        #expect(FileManager.default.isExecutableFile(atPath: BinaryRunner.path), "build the uploadq binary first")
        logPath = sandbox.root + "/\(name).log"
        let log = open(logPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw UploadQueueError.system("open", path: logPath) }
        defer { close(log) }
        child = try ChildProcess([BinaryRunner.path, "daemon", "--config", sandbox.configPath, "--log-level", "debug"] + arguments,
                                 executable: BinaryRunner.path,
                                 environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                                 input: nil, output: log, errors: log)
    }

    var pid: Int32 { child.pid }
    var isRunning: Bool { child.isRunning }
    /// The exit code once the daemon ended.
    var terminationStatus: Int32 { child.wait() }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until the daemon holds the queue (its lock file names it), then for its spool watcher to have made
    /// the spool (which it does once the queue runs, a moment later): a file dropped before would find no folder.
    func waitUntilReady(_ sandbox: Sandbox) async -> Bool {
        guard await eventually({ DaemonLock.holder(path: sandbox.state + "/daemon.lock") == self.pid }) else { return false }
        _ = await eventually(timeout: .seconds(5)) { FileManager.default.fileExists(atPath: sandbox.spool + "/.rejected") }
        return true
    }

    func kill9() {
        kill(pid, SIGKILL)
        child.wait()
    }

    /// Sends SIGTERM and returns how long the daemon took to exit.
    func terminate() -> Duration {
        let start = ContinuousClock.now
        kill(pid, SIGTERM)
        child.wait()
        return ContinuousClock.now - start
    }

    deinit {
        if child.isRunning {
            kill(pid, SIGKILL)
            child.wait()
        }
    }
}

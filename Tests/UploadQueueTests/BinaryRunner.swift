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
    static func enqueue(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> JobID {
        let enqueued = try await run(["enqueue"] + arguments, sourceLocation: sourceLocation)
        #expect(enqueued.status == 0, "\(enqueued.stderr)", sourceLocation: sourceLocation)
        return try #require(JobID(enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                            sourceLocation: sourceLocation)
    }

    /// Runs `uploadq ARGS` (or another `executable`) to completion in `directory`, waiting on a thread of its own.
    /// One still running after 300 s is killed, and that is an issue of the calling test.
    static func run(_ arguments: [String], in directory: String? = nil, environment: [String: String] = [:],
                    executable: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Output {
        let program = executable ?? path
        #expect(FileManager.default.isExecutableFile(atPath: program), "build the uploadq binary first: \(program)")
        var env = ProcessInfo.processInfo.environment
        env["UPLOADQ_CONFIG"] = nil
        env.merge(environment) { $1 }
        let argv = executable == nil ? [program] + arguments : arguments
        let (status, stdout, stderr) = try await ChildProcess.run(argv, executable: program, directory: directory,
                                                                  environment: env, sourceLocation: sourceLocation)
        return Output(status: status, stdout: String(decoding: stdout, as: UTF8.self),
                      stderr: String(decoding: stderr, as: UTF8.self))
    }
}

extension Sandbox {
    /// Runs `uploadq daemon --exit-when-idle` on this sandbox to the end (at most `limit` seconds: a daemon that
    /// does not finish fails the test instead of hanging the run); returns its output.
    @discardableResult
    func drain(limit: Int = 60, sourceLocation: SourceLocation = #_sourceLocation) async throws -> BinaryRunner.Output {
        // `-k`: a daemon that hangs on its way out of SIGTERM is killed 10 s later, and the run goes on.
        let output = try await BinaryRunner.run(["timeout", "-k", "10", "\(limit)", BinaryRunner.path, "daemon",
                                                 "--exit-when-idle", "--config", configPath],
                                                executable: "/usr/bin/timeout", sourceLocation: sourceLocation)
        #expect(output.status == 0, "daemon --exit-when-idle: status \(output.status)\n\(output.stderr.suffix(2000))",
                sourceLocation: sourceLocation)
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
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until the daemon holds the queue (its lock file names it), then for its spool watcher to have made
    /// the spool (which it does once the queue runs, a moment later): a file dropped before would find no folder.
    func waitUntilReady(_ sandbox: Sandbox) async -> Bool {
        guard await eventually({ DaemonLock.holder(path: sandbox.state + "/daemon.lock") == self.pid }) else { return false }
        _ = await eventually(timeout: .seconds(5)) { FileManager.default.fileExists(atPath: sandbox.spool + "/.rejected") }
        return true
    }

    func kill9() async {
        child.signal(SIGKILL)
        _ = await child.exit()
    }

    /// Waits for the daemon to end by itself; returns its exit code. One still running after `limit` is killed
    /// and that is an issue of the test: a hung daemon fails the test instead of hanging the whole run.
    func exitStatus(limit: Duration = .seconds(120), sourceLocation: SourceLocation = #_sourceLocation) async -> Int32 {
        await ended(within: limit, after: "running to its end", sourceLocation: sourceLocation).code
    }

    /// Sends SIGTERM and returns how long the daemon took to exit (measured where it is waited for, not
    /// lengthened by a busy concurrency pool); one still running after `limit` is killed, and that is an issue.
    func terminate(limit: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) async -> Duration {
        let start = ContinuousClock.now
        if !child.signal(SIGTERM) {
            Issue.record("the daemon had ended before it was told to stop. Log:\n\(log.suffix(3000))",
                         sourceLocation: sourceLocation)
        }
        return await ended(within: limit, after: "SIGTERM", sourceLocation: sourceLocation).at - start
    }

    /// Waits for the daemon's end; past `limit`, kills it and records an issue.
    private func ended(within limit: Duration, after what: String,
                       sourceLocation: SourceLocation) async -> (code: Int32, at: ContinuousClock.Instant) {
        let deadline = Task { [child] in
            try await Task.sleep(for: limit)
            return child.signal(SIGKILL)
        }
        let end = await child.exit()
        deadline.cancel()
        if (try? await deadline.value) == true {
            Issue.record("the daemon still ran \(limit) after \(what): killed it. Log:\n\(log.suffix(3000))",
                         sourceLocation: sourceLocation)
        }
        return end
    }

    deinit {
        if child.signal(SIGKILL) { child.wait() }
    }
}

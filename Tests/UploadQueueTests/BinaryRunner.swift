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

    /// Runs `uploadq ARGS` (or another `executable`) to completion in `directory`.
    static func run(_ arguments: [String], in directory: String? = nil, environment: [String: String] = [:],
                    executable: String? = nil) throws -> Output {
        let program = executable ?? path
        #expect(FileManager.default.isExecutableFile(atPath: program), "build the uploadq binary first: \(program)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = executable == nil ? arguments : Array(arguments.dropFirst())
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        var env = ProcessInfo.processInfo.environment
        env["UPLOADQ_CONFIG"] = nil
        env.merge(environment) { $1 }
        process.environment = env
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read both pipes at once so a chatty stderr cannot block the child while we wait on stdout.
        let stderrData = Mutex(Data())
        let stderrRead = DispatchGroup()
        DispatchQueue.global().async(group: stderrRead) {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            stderrData.withLock { $0 = data }
        }
        let stdoutData = out.fileHandleForReading.readDataToEndOfFile()
        stderrRead.wait()
        process.waitUntilExit()
        return Output(status: process.terminationStatus, stdout: String(decoding: stdoutData, as: UTF8.self),
                      stderr: String(decoding: stderrData.withLock { $0 }, as: UTF8.self))
    }
}

/// A running `uploadq daemon`, logging to a file in the sandbox.
final class DaemonProcess: @unchecked Sendable {
    let process = Process()
    let logPath: String

    init(sandbox: Sandbox, name: String = "daemon", environment: [String: String] = [:]) throws {
        #expect(FileManager.default.isExecutableFile(atPath: BinaryRunner.path), "build the uploadq binary first")
        logPath = sandbox.root + "/\(name).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: BinaryRunner.path)
        process.arguments = ["daemon", "--config", sandbox.configPath, "--log-level", "debug"]
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardError = log
        process.standardOutput = log
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until the daemon holds the queue (its lock file names it).
    func waitUntilReady(_ sandbox: Sandbox) async -> Bool {
        await eventually { DaemonLock.holder(path: sandbox.state + "/daemon.lock") == self.pid }
    }

    func kill9() {
        kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// Sends SIGTERM and returns how long the daemon took to exit.
    func terminate() -> Duration {
        let start = ContinuousClock.now
        kill(pid, SIGTERM)
        process.waitUntilExit()
        return ContinuousClock.now - start
    }

    deinit {
        if process.isRunning {
            kill(pid, SIGKILL)
            process.waitUntilExit()
        }
    }
}

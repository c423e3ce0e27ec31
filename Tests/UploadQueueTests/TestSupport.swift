import Foundation
import Testing
@testable import UploadQueue

/// A scratch directory with a config, spool and target, removed at the end of the test.
final class Sandbox: @unchecked Sendable {
    let root: String
    var spool: String { root + "/spool" }
    var target: String { root + "/uploaded" }
    var state: String { root + "/state" }
    var configPath: String { root + "/uploadq.toml" }

    init(config extra: String = "", bandwidth: Int64 = 0, concurrency: Int = 4, quietPeriod: String = "300ms",
         retryInterval: String = "1s", limits: String = "", spool spoolKeys: String = "",
         bandwidthKeys: String = "") throws {
        let template = FileManager.default.temporaryDirectory.path + "/uploadq-test-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let made = mkdtemp(&bytes) else { throw UploadQueueError(.io, "mkdtemp failed") }
        root = String(cString: made)
        let text = """
            state_dir = "state"
            [spool]
            dir = "spool"
            \(spoolKeys.contains("destination =") ? "" : #"destination = "default""#)
            quiet_period = "\(quietPeriod)"
            rescan_interval = "2s"
            \(spoolKeys)
            [limits]
            concurrency = \(concurrency)
            \(limits)
            [retry]
            initial_interval = "\(retryInterval)"
            initial_attempts = 3
            later_interval = "\(retryInterval == "1s" ? "2s" : retryInterval)"
            jitter = 0.1
            [bandwidth]
            unmetered = \(bandwidth)
            \(bandwidthKeys)
            [destinations.default]
            protocol = "file"
            url = "file://uploaded"
            chunk_size = "1MiB"
            \(extra)
            """
        try text.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: root)
    }

    func configuration() throws -> Configuration {
        try ConfigurationLoader.load(path: configPath)
    }

    /// Writes `size` pseudo-random bytes (seeded, so content differs per seed) and returns the path.
    @discardableResult
    func makeFile(_ path: String, size: Int, seed: UInt64) throws -> String {
        var generator = SeededGenerator(seed: seed)
        var data = Data(count: size)
        // Eight bytes a draw: a debug build fills 20 MiB in a fraction of a second, not seconds of a pool thread.
        data.withUnsafeMutableBytes { raw in
            var offset = 0
            while offset + 8 <= size {
                raw.storeBytes(of: generator.next().littleEndian, toByteOffset: offset, as: UInt64.self)
                offset += 8
            }
            var last = generator.next()
            while offset < size {
                raw[offset] = UInt8(truncatingIfNeeded: last)
                last >>= 8
                offset += 1
            }
        }
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Writes `size` bytes from /dev/urandom (fast for large files) and returns the path.
    @discardableResult
    func makeRandomFile(_ path: String, size: Int) throws -> String {
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? output.close() }
        var remaining = size
        while remaining > 0 {
            let block = try random.read(upToCount: min(remaining, 4 << 20)) ?? Data()
            try output.write(contentsOf: block)
            remaining -= block.count
        }
        return path
    }

    /// Files in the target directory (not the temporary `.uploadq-*.partial` ones), recursively.
    func deliveredFiles() -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: target) else { return [] }
        return walker.compactMap { $0 as? String }
            .filter { !($0 as NSString).lastPathComponent.hasPrefix(".") }
            .filter { var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: target + "/" + $0, isDirectory: &isDirectory) && !isDirectory.boolValue }
            .sorted()
    }
}

/// A small deterministic generator (SplitMix64) for test data.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// SHA-256 of a file as it is now, to its end, through the digest intake uses (checked against a known vector in
/// IntakeTests). A file still being written (a server's upload of another test) is hashed as far as it goes.
func sha256(ofFile path: String) throws -> String {
    let descriptor = open(path, O_RDONLY)
    guard descriptor >= 0 else { throw UploadQueueError.system("open", path: path) }
    defer { close(descriptor) }
    var digest = SHA256Digest()
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else {
            if count < 0 { throw UploadQueueError.system("read", path: path) }
            break
        }
        buffer.withUnsafeBytes { digest.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
    return digest.finish()
}

/// A TCP socket listening on a free loopback port (not accepting: the caller does, or leaves connections waiting).
func loopbackListener(backlog: Int32 = 64) throws -> (descriptor: Int32, port: UInt16) {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw UploadQueueError(.io, "cannot open a socket: errno \(errno)") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Bool in
            bind(descriptor, raw, length) == 0 && listen(descriptor, backlog) == 0
                && getsockname(descriptor, raw, &length) == 0
        }
    }
    guard bound else {
        close(descriptor)
        throw UploadQueueError(.io, "cannot listen on loopback: errno \(errno)")
    }
    return (descriptor, UInt16(bigEndian: address.sin_port))
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes; returns whether it held.
func eventually(timeout: Duration = .seconds(20), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline && !Task.isCancelled {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

/// A small tmpfs mounted for one test (the tests run as root, as CI does): a file system of its own for
/// cross-device moves, and one that fills up for disk-full cases. Unmounted at the end. A mount that fails fails
/// the test: it never skips.
final class TmpfsMount: @unchecked Sendable {
    let path: String

    init(at path: String, size: String) async throws {
        self.path = path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let result = try await BinaryRunner.run(["mount", "-t", "tmpfs", "-o", "size=\(size),mode=0700", "tmpfs", path],
                                          executable: "/bin/mount")
        guard result.status == 0 else {
            Issue.record("cannot mount a tmpfs at \(path) (the tests need root): \(result.stderr)")
            throw UploadQueueError(.io, "mount failed", path: path)
        }
    }

    /// Changes the size: smaller to fill it up, larger to give space back.
    func resize(_ size: String) async throws {
        let result = try await BinaryRunner.run(["mount", "-o", "remount,size=\(size)", path], executable: "/bin/mount")
        #expect(result.status == 0, "remount \(path): \(result.stderr)")
    }

    deinit {
        // A lazy unmount returns at once; `deinit` cannot wait on another thread.
        _ = try? ChildProcess.runBlocking(["umount", "-l", path], executable: "/bin/umount",
                                          environment: ProcessInfo.processInfo.environment)
    }
}

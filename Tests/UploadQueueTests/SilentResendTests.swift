import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// libcurl resends a request on another connection when a reused one dies before any answer, and keeps the text of
/// that recovered failure as the transfer's error: the error of what then ends the request must be its own.
struct SilentResendTests {
    /// libcurl's `CURLE_OPERATION_TIMEDOUT`.
    private let operationTimedOut = 28

    @Test("a silent resend is told from libcurl's callbacks, and an error after it names what ended the request")
    func decisions() {
        var fresh = SilentResend()
        let firstSocket = fresh.socketOpened(), firstSend = fresh.requestGoingOut()
        #expect(!firstSocket && !firstSend)
        #expect(!fresh.hasResent && !fresh.timeoutIsStall)
        // A new connection after the first send: a resend, still connecting (a timeout then is the connect's).
        var reconnecting = fresh
        let newSocket = reconnecting.socketOpened()
        #expect(newSocket)
        #expect(reconnecting.hasResent && !reconnecting.timeoutIsStall)
        reconnecting.recover("Recv failure: Connection reset by peer")
        reconnecting.recover("a later text")
        #expect(reconnecting.recovered == "Recv failure: Connection reset by peer")
        let resent = reconnecting.requestGoingOut()
        #expect(resent && reconnecting.timeoutIsStall)
        // A resend on another connection from the pool: no socket, a second send.
        var pooled = fresh
        let secondSend = pooled.requestGoingOut()
        #expect(secondSend && pooled.timeoutIsStall)
        pooled.recover("")
        #expect(pooled.recovered == nil)

        let url = "http://127.0.0.1:1/files/x?X-Amz-Signature=secret"
        let rule = StallDetection(minimumRate: 1, window: .seconds(3))
        let stall = TransferError(curlCodeNumber: operationTimedOut, detail: "", url: url, resend: reconnecting,
                                  stall: rule)
        #expect(stall.code == .stall, "\(stall)")
        #expect(stall.message.hasPrefix("stalled: the resent request stopped moving (below 1 bytes/s for 3000 ms"),
                "\(stall.message)")
        #expect(stall.message.hasSuffix("); libcurl had resent the request on another connection after: Recv failure: "
            + "Connection reset by peer") && !stall.message.contains("secret"), "\(stall.message)")
        var stillConnecting = SilentResend()
        _ = stillConnecting.requestGoingOut()
        _ = stillConnecting.socketOpened()
        stillConnecting.recover("Recv failure: Connection reset by peer")
        let timeout = TransferError(curlCodeNumber: operationTimedOut, detail: "", url: url, resend: stillConnecting)
        #expect(timeout.code == .timeout && timeout.message.hasPrefix("Timeout was reached (http://127.0.0.1:1/"),
                "\(timeout.message)")
        // Without a resend, libcurl's own words decide, as before.
        #expect(TransferError(curlCodeNumber: operationTimedOut, detail: "Operation too slow. Less than 1 bytes/sec",
                              url: url).code == .stall)
        #expect(TransferError(curlCodeNumber: operationTimedOut, detail: "", url: url).code == .timeout)
    }

    @Test("a stall after libcurl silently resent a request is a stall, not the failure libcurl recovered from")
    func stallOfTheResend() async throws {
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let url = proxy.url("/engine/\(UUID().uuidString).bin")
        // A first request leaves a connection in the pool; the next one goes on it.
        #expect(try await engine.perform(HTTPRequest(method: "PUT", url: url, body: .bytes([1]))).status == 201)
        // The reset comes once the body is in: libcurl reads it (a receive error on a reused connection, before
        // any answer) and resends on a new connection, which the second rule stalls for longer than the test runs.
        let body = [UInt8](repeating: 7, count: 64 << 10)
        try await proxy.add(["method": "PUT", "action": "reset", "after_bytes": body.count - 1])
        try await proxy.add(["method": "PUT", "action": "stall", "after_bytes": 1000, "seconds": 120])
        var options = TransferOptions()
        options.stall = StallDetection(minimumRate: 1, window: .seconds(1))
        do {
            let response = try await engine.perform(HTTPRequest(method: "PUT", url: url, body: .bytes(body),
                                                                options: options))
            Issue.record("a stalled request was answered \(response.status)")
        } catch {
            let actions = try await proxy.requests().compactMap { $0["action"] as? String }
            #expect(actions == ["reset", "stall"], "libcurl resent the request once: \(actions)")
            #expect(error.code == .stall, "\(error)")
            // What ended it first, and what libcurl recovered from as a note.
            #expect(error.message.hasPrefix("stalled: the resent request stopped moving")
                    && error.message.contains("resent the request on another connection after: Recv failure"),
                    "\(error.message)")
        }
    }

    @Test("a resend refused at its connect is a connect error, with the failure libcurl recovered from as a note")
    func resendRefused() async throws {
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let server = try VanishingServer.start()
        let url = "http://127.0.0.1:\(server.port)/upload"
        #expect(try await engine.perform(HTTPRequest(method: "PUT", url: url, body: .bytes([1]))).status == 201)
        do {
            let response = try await engine.perform(HTTPRequest(method: "PUT", url: url,
                                                                body: .bytes([UInt8](repeating: 7, count: 4096))))
            Issue.record("the vanished server answered \(response.status)")
        } catch {
            #expect(error.code == .connect, "\(error)")
            // libcurl wrote no words for the refused connect: its summary, not the recovered reset, leads.
            #expect(error.message.hasPrefix("Couldn't connect to server (http://127.0.0.1:\(server.port)/upload); "
                + "libcurl had resent the request on another connection after: Recv failure"), "\(error.message)")
        }
        #expect(await server.served(), "the server saw both requests")
    }
}

/// A loopback HTTP/1.1 server for one connection: it answers the first request 201 and keeps the connection open,
/// reads the second request whole, stops listening, and resets the connection without an answer. libcurl, its
/// reused connection dead before any answer, resends on a new connection, which is refused.
private struct VanishingServer: Sendable {
    let port: UInt16
    private let outcome: ServedFlag

    static func start() throws -> VanishingServer {
        let (listener, port) = try loopbackListener(backlog: 4)
        let outcome = ServedFlag()
        Thread { outcome.set(serve(listener)) }.start()
        return VanishingServer(port: port, outcome: outcome)
    }

    /// Whether both requests were read in full (waits for the server's thread, at most 10 s).
    func served() async -> Bool {
        await eventually(timeout: .seconds(10)) { outcome.value != nil } && outcome.value == true
    }

    private static func serve(_ listener: Int32) -> Bool {
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else {
            close(listener)
            return false
        }
        var pending: [UInt8] = []
        let first = readRequest(connection, &pending)
        let answer = Array("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".utf8)
        let answered = first && answer.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) } == answer.count
        let second = answered && readRequest(connection, &pending)
        close(listener)
        var reset = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(connection, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
        close(connection)
        return second
    }

    /// Reads one request, its head and its `Content-Length` body, out of `pending` and the connection.
    private static func readRequest(_ connection: Int32, _ pending: inout [UInt8]) -> Bool {
        let separator = Array("\r\n\r\n".utf8)
        while true {
            if let end = pending.indices.dropLast(3).first(where: { Array(pending[$0..<$0 + 4]) == separator }) {
                let head = String(decoding: pending[..<end], as: UTF8.self).lowercased()
                let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if pending.count >= end + 4 + length {
                    pending.removeFirst(end + 4 + length)
                    return true
                }
            }
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            let count = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            guard count > 0 else { return false }
            pending += chunk[0..<count]
        }
    }
}

/// The server thread's result, read by the test.
private final class ServedFlag: Sendable {
    private let state = Mutex<Bool?>(nil)
    var value: Bool? { state.withLock { $0 } }
    func set(_ served: Bool) { state.withLock { $0 = served } }
}

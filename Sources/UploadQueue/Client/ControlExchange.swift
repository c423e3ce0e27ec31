import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// One HTTP/1.1 exchange with a daemon's control API on its Unix socket: a connection of its own, one request, the
/// whole answer, and the connection closed (swift-nio's HTTP/1 codec; no parser of our own).
struct ControlExchange: Sendable {
    let socketPath: String

    /// What the daemon answered: the status and the body.
    struct Answer: Sendable {
        var status: Int
        var body: Data

        /// The body as a JSON object, or a `badRequest` error naming the route.
        func object(_ route: String) throws(UploadQueueError) -> [String: Any] {
            guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
                throw UploadQueueError(.badRequest, "the daemon's answer to \(route) is not a JSON object (HTTP \(status))")
            }
            return object
        }

        /// The API's error (`{"error": {"code", "message"}}`) as a queue error; its message names the job or the
        /// path already (the daemon's words), so neither is set again.
        func error(_ route: String) -> UploadQueueError {
            let detail = (try? object(route))?["error"] as? [String: Any]
            let code = (detail?["code"] as? String).map(UploadQueueError.Code.init(rawValue:)) ?? .badRequest
            let message = detail?["message"] as? String ?? "the daemon answered \(route) with HTTP \(status)"
            return UploadQueueError(code, message)
        }
    }

    /// Sends `method target` with an optional JSON body and headers; the answer, whatever its status.
    ///
    /// A daemon that is not there (no socket, nobody listening), or that goes away or does not answer within
    /// `deadline`, is `daemonUnreachable`; a socket this user may not connect to is `forbidden`.
    func send(_ method: HTTPMethod, _ target: String, json body: Data? = nil,
              headers extra: [(String, String)] = [], deadline: Duration = .seconds(60)) async throws -> Answer {
        // A connection closed before the request went out (nothing of it was written) is made once more.
        do {
            return try await sendOnce(method, target, json: body, headers: extra, deadline: deadline)
        } catch is ClosedBeforeRequest {}
        do {
            return try await sendOnce(method, target, json: body, headers: extra, deadline: deadline)
        } catch is ClosedBeforeRequest {
            throw UploadQueueError(.daemonUnreachable, "the daemon closed two connections before \(method) \(target) "
                + "could be sent; try again once it runs", path: socketPath)
        }
    }

    /// The connection was closed before the request's first byte was written to it.
    private struct ClosedBeforeRequest: Error {}

    private func sendOnce(_ method: HTTPMethod, _ target: String, json body: Data?, headers extra: [(String, String)],
                          deadline: Duration) async throws -> Answer {
        let channel = try await connect()
        // A daemon that stops answering (wedged, or stopped with the connection open) ends the exchange at its
        // deadline: the connection is closed, and the read below ends.
        let timer = channel.channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(deadline.components.seconds) * 1_000_000_000
            + deadline.components.attoseconds / 1_000_000_000)) { [channel = channel.channel] in
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: target)
        head.headers.add(name: "Host", value: "localhost")
        head.headers.add(name: "Connection", value: "close")
        for (name, value) in extra { head.headers.add(name: name, value: value) }
        if let body {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: "\(body.count)")
        } else if method == .POST {
            head.headers.add(name: "Content-Length", value: "0")
        }
        do {
            return try await exchange(channel, head: head, body: body, method: method, target: target, deadline: deadline)
        } catch let error as UploadQueueError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch let closed as ClosedBeforeRequest {
            throw closed
        } catch {
            // Reset or closed under it (a daemon restarting): as if it were not there.
            try Task.checkCancellation()
            throw UploadQueueError(.daemonUnreachable, "the daemon's connection broke during \(method) \(target): "
                + "\(error); try again once it runs", path: socketPath)
        }
    }

    /// Reads a streamed answer (`GET target`, the event stream) line by line: `line` gets each, without its
    /// newline, as it arrives. Returns when the daemon ends the stream (it stopped, or dropped this follower: the
    /// last line said so); throws the daemon's error for an answer other than 200, and `daemonUnreachable` when there
    /// is no daemon or the connection breaks. Cancelling the task closes the connection.
    func follow(_ target: String, headers extra: [(String, String)] = [],
                line: (String) async throws -> Void) async throws {
        let channel = try await connect()
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: target)
        head.headers.add(name: "Host", value: "localhost")
        head.headers.add(name: "Connection", value: "close")
        for (name, value) in extra { head.headers.add(name: name, value: value) }
        do {
            try await withTaskCancellationHandler {
                try await channel.executeThenClose { inbound, outbound in
                    try await outbound.write(.head(head))
                    try await outbound.write(.end(nil))
                    var status = 0
                    var pending = Data()
                    var refusal = Data()
                    for try await part in inbound {
                        switch part {
                        case .head(let response):
                            status = Int(response.status.code)
                        case .body(let buffer) where status != 200:
                            refusal.append(contentsOf: buffer.readableBytesView)
                        case .body(let buffer):
                            pending.append(contentsOf: buffer.readableBytesView)
                            while let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                                let text = String(decoding: pending[pending.startIndex..<end], as: UTF8.self)
                                pending.removeSubrange(pending.startIndex...end)
                                do {
                                    try await line(text)
                                } catch {
                                    throw LineRefused(error: error)
                                }
                            }
                        case .end:
                            if status != 200 { throw Answer(status: status, body: refusal).error("GET \(target)") }
                            return
                        }
                    }
                    try Task.checkCancellation()
                    throw UploadQueueError(.daemonUnreachable, "the daemon closed the event stream without ending it "
                        + "(it stopped?); follow again once it runs", path: socketPath)
                }
            } onCancel: {
                channel.channel.close(promise: nil)
            }
        } catch let refused as LineRefused {
            throw refused.error
        } catch let error as UploadQueueError {
            throw error
        } catch {
            try Task.checkCancellation()
            throw UploadQueueError(.daemonUnreachable, "the daemon's connection broke during GET \(target): \(error); "
                + "follow again once it runs", path: socketPath)
        }
    }

    /// What the caller's `line` threw: handed back as it is, never taken for a broken connection.
    private struct LineRefused: Error {
        let error: any Error
    }

    /// A connection to the daemon's socket with the HTTP/1 client codec.
    private func connect() async throws -> NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart> {
        do {
            return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: socketPath) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                            wrappingChannelSynchronously: channel)
                    }
                }
        } catch let error as IOError where [EACCES, EPERM].contains(error.errnoCode) {
            throw UploadQueueError(.forbidden, "this user may not connect to the daemon's control socket: ask its admin "
                + "to add it to the socket's group ([api] group)", path: socketPath, cause: String(cString: strerror(error.errnoCode)))
        } catch {
            throw UploadQueueError(.daemonUnreachable, "no daemon answers on its control socket: \(error); start "
                + "`uploadq daemon`", path: socketPath)
        }
    }

    private func exchange(_ channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>,
                          head: HTTPRequestHead, body: Data?, method: HTTPMethod, target: String,
                          deadline: Duration) async throws -> Answer {
        try await channel.executeThenClose { inbound, outbound in
            do {
                try await outbound.write(.head(head))
            } catch ChannelError.ioOnClosedChannel {
                throw ClosedBeforeRequest()
            }
            // A request whose head is all of it (no body) is whole once the head is in: the daemon may answer and
            // close (`Connection: close`) before the end is written here. Its answer is read all the same.
            var unsent: (any Error)?
            do {
                if let body { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
                try await outbound.write(.end(nil))
            } catch ChannelError.ioOnClosedChannel {
                unsent = ChannelError.ioOnClosedChannel
            }
            var answer = Answer(status: 0, body: Data())
            for try await part in inbound {
                switch part {
                case .head(let response):
                    answer.status = Int(response.status.code)
                case .body(let buffer):
                    answer.body.append(contentsOf: buffer.readableBytesView)
                case .end:
                    return answer
                }
            }
            try Task.checkCancellation()
            if let unsent { throw unsent }
            throw UploadQueueError(.daemonUnreachable, "the daemon closed the connection (or gave no answer within "
                + "\(deadline)) before answering \(method) \(target); try again once it runs", path: socketPath)
        }
    }
}

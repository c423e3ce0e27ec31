import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// One connection to the control API: collects each request (head and body, at most `ControlServer.bodyLimit`),
/// has `ControlAPI` answer it as the connection's peer, and writes the reply. Requests on one connection are
/// answered in order, one at a time: NIO's pipelining handler holds the next until the reply to this one is handed
/// to the socket, and the next is answered only once that reply has gone out, so a client that pipelines requests
/// and reads nothing has one reply in the daemon's memory, not one per request (a client that takes nothing of it
/// is closed by `ControlDeadlineHandler`). A streamed reply (the event stream) is written chunk by chunk as it
/// comes, and ends its connection.
final class ControlConnection: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let api: ControlAPI
    private let peer: ControlPeer
    private let registry: ControlServer.Registry
    private let logger: Logger
    /// A request that came whole while the reply before it was still going out: answered once it has.
    private var waiting: (request: ControlRequest, keepAlive: Bool)?
    /// A reply is going out (handed to the socket, not yet written), or a stream ends its connection: what comes
    /// meanwhile waits (or, once a stream ended, is never answered).
    private var replying = false
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    /// The body grew past the limit: the rest is dropped, and the request refused.
    private var tooLarge = false
    /// The task answering the request now; cancelled when the connection goes (a long poll's client left).
    private var answering: Task<Void, Never>?

    init(api: ControlAPI, peer: ControlPeer, registry: ControlServer.Registry, logger: Logger) {
        self.api = api
        self.peer = peer
        self.registry = registry
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
            tooLarge = false
        case .body(var chunk):
            if body.readableBytes + chunk.readableBytes > ControlServer.bodyLimit {
                tooLarge = true
                body.clear()
            } else if !tooLarge {
                body.writeBuffer(&chunk)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            context.triggerUserOutboundEvent(ControlDeadlineHandler.Event.requestComplete, promise: nil)
            let keepAlive = head.isKeepAlive
            if tooLarge {
                write(.error(413, "payload-too-large", "a request body may be at most 1 MiB"), keepAlive: false,
                      context: context)
                return
            }
            let request = ControlRequest(method: head.method.rawValue, target: head.uri,
                                         idempotencyKey: head.headers.first(name: "Idempotency-Key"),
                                         accept: head.headers.first(name: "Accept"),
                                         lastEventID: head.headers.first(name: "Last-Event-ID"),
                                         body: Data(body.readableBytesView))
            body.clear()
            if answering != nil || replying {
                // NIO's pipelining handler gives no more than the next one; a client that gets more past it is closed.
                guard waiting == nil else {
                    context.close(promise: nil)
                    return
                }
                waiting = (request, keepAlive)
            } else {
                answer(request, keepAlive: keepAlive, context: context)
            }
        }
    }

    /// Has the API answer `request`, then writes the reply (or streams it).
    private func answer(_ request: ControlRequest, keepAlive: Bool, context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let (api, peer, registry) = (self.api, self.peer, self.registry)
        let eventLoop = context.eventLoop
        // Counted until its reply is handed to the event loop: the server stops the loop only after.
        registry.answerStarted()
        answering = Task {
            defer { registry.answerEnded() }
            let reply = await api.respond(request, peer: peer)
            guard let stream = reply.stream else {
                eventLoop.execute {
                    let (handler, context) = bound.value
                    handler.answering = nil
                    handler.write(reply, keepAlive: keepAlive, context: context)
                }
                return
            }
            let sink = ControlStream.Sink { data in
                try await eventLoop.flatSubmit {
                    let (handler, context) = bound.value
                    return handler.writeChunk(data, context: context)
                }.get()
            }
            do {
                try await eventLoop.flatSubmit {
                    let (handler, context) = bound.value
                    return handler.writeStreamHead(reply, context: context)
                }.get()
                try await stream.body(sink)
            } catch {
                // The client went, a write stalled, or the daemon stops: the connection is closed below.
            }
            eventLoop.execute {
                let (handler, context) = bound.value
                handler.answering = nil
                handler.endStream(context: context)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        answering?.cancel()
        answering = nil
        waiting = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("control API connection of uid \(peer.uid): \(error)")
        context.close(promise: nil)
    }

    /// The head of a streamed reply (chunked, the connection closed after it) and what it sends first.
    private func writeStreamHead(_ reply: ControlReply, context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        guard context.channel.isActive else { return context.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        var headers = HTTPHeaders()
        headers.add(name: "Connection", value: "close")
        headers.add(name: "Cache-Control", value: "no-store")
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: reply.status),
                                    headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        return writeChunk(reply.body, context: context)
    }

    /// One chunk of a streamed reply, flushed; the future completes once the socket took it (or fails once the
    /// connection is closed: by a client that takes nothing, `ControlDeadlineHandler`).
    private func writeChunk(_ data: Data, context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        guard context.channel.isActive else { return context.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        let written = context.eventLoop.makePromise(of: Void.self)
        // An empty chunk would end the chunked body: only the flush goes out.
        if data.isEmpty {
            context.flush()
            written.succeed()
        } else {
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: data)))), promise: written)
        }
        return written.futureResult
    }

    /// Ends a streamed reply and its connection; a request pipelined after the stream is never answered.
    private func endStream(context: ChannelHandlerContext) {
        replying = true
        waiting = nil
        guard context.channel.isActive else { return }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    private func write(_ reply: ControlReply, keepAlive: Bool, context: ChannelHandlerContext) {
        guard context.channel.isActive else {
            reply.written?()
            return
        }
        var headers = HTTPHeaders()
        if !reply.body.isEmpty, !reply.headers.contains(where: { $0.0 == "Content-Type" }) {
            headers.add(name: "Content-Type", value: "application/json")
        }
        headers.add(name: "Content-Length", value: String(reply.body.count))
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: reply.status),
                                    headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if !reply.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        replying = true
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        let channel = context.channel
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        // Not the reply itself: its body goes once the socket's buffer holds its copy.
        let onWritten = reply.written
        written.futureResult.whenComplete { result in
            onWritten?()
            let (handler, context) = bound.value
            handler.replying = false
            guard keepAlive, case .success = result else {
                channel.close(promise: nil)
                return
            }
            // Idle again: the next request has `idle_timeout` to begin, unless one came meanwhile.
            channel.triggerUserOutboundEvent(ControlDeadlineHandler.Event.answered, promise: nil)
            if let (request, keepAlive) = handler.waiting {
                handler.waiting = nil
                handler.answer(request, keepAlive: keepAlive, context: context)
            }
        }
    }
}

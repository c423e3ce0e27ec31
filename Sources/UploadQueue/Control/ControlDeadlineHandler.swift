import NIOCore

/// The first handler of a control connection: closes it when a request takes longer than `request_timeout` to
/// arrive, or it stays idle past `idle_timeout` (`ConnectionDeadline` decides), or the client takes none of what is
/// written to it for `idle_timeout` (a reply or a stream it does not read: a slow reader that takes some goes on).
/// It sees the bytes as they come and go; `ControlConnection` tells it, through outbound user events, when a
/// request is whole and when its answer is written.
final class ControlDeadlineHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// What `ControlConnection` tells it.
    enum Event: Sendable {
        case requestComplete
        case answered
    }

    private var deadline: ConnectionDeadline
    private var timer: Scheduled<Void>?
    /// Bytes handed to the socket's channel in all, and how many of them had left it at the last look.
    private var handedOn = 0
    private var sentAtLastLook = 0
    /// Looks every `idle_timeout` whether the client took any of what waits for it; while something does.
    private var writeWatch: Scheduled<Void>?

    init(requestTimeout: Duration, idleTimeout: Duration) {
        deadline = ConnectionDeadline(requestTimeout: requestTimeout, idleTimeout: idleTimeout)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { perform(deadline.opened(), context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        perform(deadline.opened(), context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        writeWatch?.cancel()
        writeWatch = nil
        context.fireChannelInactive()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let bytes = unwrapOutboundIn(data).readableBytes
        // Next to the socket: the channel counts these bytes as buffered from here on.
        context.write(data, promise: promise)
        handedOn += bytes
        if writeWatch == nil { watchWrites(context: context) }
    }

    /// In `idle_timeout`: closes the connection if bytes wait for the client and none left since the last look,
    /// looks again later if some did, stops looking when none wait.
    private func watchWrites(context: ChannelHandlerContext) {
        sentAtLastLook = handedOn - Self.buffered(context.channel)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        writeWatch = context.eventLoop.scheduleTask(in: Self.timeAmount(deadline.idleTimeout)) {
            let (handler, context) = bound.value
            handler.writeWatch = nil
            let buffered = Self.buffered(context.channel)
            guard buffered > 0 else { return }
            guard handler.handedOn - buffered > handler.sentAtLastLook else {
                context.close(promise: nil)
                return
            }
            handler.watchWrites(context: context)
        }
    }

    /// The bytes written to the channel that the socket has not taken yet.
    private static func buffered(_ channel: any Channel) -> Int {
        (try? channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)) ?? 0
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        perform(deadline.received(), context: context)
        context.fireChannelRead(data)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let event = event as? Event else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        switch event {
        case .requestComplete: perform(deadline.requestComplete(), context: context)
        case .answered: perform(deadline.answered(), context: context)
        }
        promise?.succeed()
    }

    private func perform(_ action: ConnectionDeadline.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            return
        case .cancel:
            timer?.cancel()
            timer = nil
        case .start(let limit):
            timer?.cancel()
            let channel = context.channel
            timer = context.eventLoop.scheduleTask(in: Self.timeAmount(limit)) { channel.close(promise: nil) }
        }
    }
}

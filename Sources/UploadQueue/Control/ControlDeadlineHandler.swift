import NIOCore

/// The first handler of a control connection: closes it when a request takes longer than `request_timeout` to
/// arrive, or it stays idle past `idle_timeout` (`ConnectionDeadline` decides). It sees the bytes as they come;
/// `ControlConnection` tells it, through outbound user events, when a request is whole and when its answer is
/// written.
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
        context.fireChannelInactive()
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
            timer = context.eventLoop.scheduleTask(in: .nanoseconds(Int64(limit.components.seconds) * 1_000_000_000
                + limit.components.attoseconds / 1_000_000_000)) {
                channel.close(promise: nil)
            }
        }
    }
}

import CUploadQueueSystem
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The control API's HTTP/1.1 server on a Unix socket (`[api] socket`, by default `state_dir/api.sock`): swift-nio's
/// HTTP/1 codec on one event-loop thread, each connection tagged with its peer's credentials (`SO_PEERCRED`) before
/// its first request is read.
///
/// The socket is made with its mode (0600, or 0660 for `[api] group`) before it listens: nobody can connect in
/// between. Requests are answered by `ControlAPI`; a body larger than 1 MiB is refused unread.
final class ControlServer: Sendable {
    /// The socket's path.
    let path: String
    private let loops: MultiThreadedEventLoopGroup
    private let channel: any Channel
    private let registry: Registry
    /// The socket file this server made: on stopping it removes that file alone, never one a server started next
    /// on the same path has made meanwhile.
    private let socketFile: (device: UInt64, inode: UInt64)

    /// The largest request body read.
    static let bodyLimit = 1 << 20

    /// The open connections and the requests being answered, so that stopping closes the first and waits for the
    /// second before the event loop goes; and who may open one more (`[api] max_connections`,
    /// `max_connections_per_user`, `admin_connections`): a dropper cannot take every descriptor the daemon has, nor
    /// the admin's last connections.
    final class Registry: Sendable {
        private struct State {
            var channels: [ObjectIdentifier: any Channel] = [:]
            var perUser: [uid_t: Int] = [:]
            var answering = 0
            /// Connections refused since the last warning, by uid, and when that warning was.
            var refused: [uid_t: Int] = [:]
            var lastWarning: ContinuousClock.Instant?
        }

        private let state = Mutex(State())
        private let settings: Configuration.ControlSettings
        private let logger: Logger

        init(settings: Configuration.ControlSettings, logger: Logger) {
            self.settings = settings
            self.logger = logger
        }

        /// Whether a peer that has `own` connections open, with `open` open in all, may open one more: an admin up to
        /// `maxConnections`; a dropper up to `maxConnectionsPerUser` of its own, leaving `adminConnections` free.
        static func mayOpen(admin: Bool, own: Int, open: Int, settings: Configuration.ControlSettings) -> Bool {
            if admin { return open < settings.maxConnections }
            return own < settings.maxConnectionsPerUser && open < settings.maxConnections - settings.adminConnections
        }

        /// Takes a new connection of `peer` in, unless it may not open one more (said in the log at most once a
        /// minute, with how many were refused and whose).
        func admit(_ channel: any Channel, peer: ControlPeer) -> Bool {
            let uid = peer.uid
            let (admitted, warning) = state.withLock { state -> (Bool, String?) in
                if Self.mayOpen(admin: peer.isAdmin, own: state.perUser[uid, default: 0], open: state.channels.count,
                                settings: settings) {
                    state.channels[ObjectIdentifier(channel)] = channel
                    state.perUser[uid, default: 0] += 1
                    return (true, nil)
                }
                state.refused[uid, default: 0] += 1
                let now = ContinuousClock.now
                guard state.lastWarning.map({ now - $0 >= .seconds(60) }) ?? true else { return (false, nil) }
                state.lastWarning = now
                let whose = state.refused.sorted { $0.value > $1.value }.prefix(5)
                    .map { "uid \($0.key): \($0.value)" }.joined(separator: ", ")
                let total = state.refused.values.reduce(0, +)
                state.refused = [:]
                return (false, "control API: \(total) connection(s) refused since the last word on it, too many open "
                    + "(\(whose)); [api] max_connections, max_connections_per_user and admin_connections set how many")
            }
            if let warning { logger.warning("\(warning)") }
            if admitted {
                channel.closeFuture.whenComplete { [self] _ in
                    state.withLock { state in
                        state.channels[ObjectIdentifier(channel)] = nil
                        state.perUser[uid, default: 1] -= 1
                    }
                }
            }
            return admitted
        }

        func answerStarted() { state.withLock { $0.answering += 1 } }
        func answerEnded() { state.withLock { $0.answering -= 1 } }

        /// Closes every connection; returns once no request is being answered (at most `limit`).
        func closeAll(waiting limit: Duration) async {
            let open = state.withLock { Array($0.channels.values) }
            for channel in open { channel.close(promise: nil) }
            let deadline = ContinuousClock.now + limit
            while state.withLock({ $0.answering }) > 0, ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    /// Binds the socket (replacing a stale one: the caller holds the daemon lock) and starts serving `api`.
    init(path: String, settings: Configuration.ControlSettings, api: ControlAPI,
         logger: Logger) async throws(UploadQueueError) {
        let listener = try UnixListener(path: path, group: settings.group, table: "api", backlog: 64)
        let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let registry = Registry(settings: settings, logger: logger)
        let bootstrap = ServerBootstrap(group: loops)
            .childChannelInitializer { channel in
                // The peer's credentials, read once from the kernel; a socket that has none is not served.
                guard let provider = channel as? SocketOptionProvider else {
                    return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
                }
                let credentials: EventLoopFuture<uploadq_peer_credentials> = provider.unsafeGetSocketOption(
                    level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(uploadq_so_peercred()))
                // A peer with more groups than the answer holds may be in any group: checked as such.
                let groups: EventLoopFuture<([gid_t], ControlPeer.GroupUncertainty)> = provider.unsafeGetSocketOption(
                    level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(uploadq_so_peergroups())
                ).map { (answer: uploadq_peer_groups) in ControlPeer.groups(in: answer) }.recover { _ in ([], .any) }
                return credentials.and(groups).flatMapThrowing { credentials, groups in
                    let peer = ControlPeer(uid: credentials.uid, gid: credentials.gid, pid: credentials.pid,
                                           supplementaryGroups: groups.0, groupsUncertain: groups.1)
                    guard registry.admit(channel, peer: peer) else {
                        throw ChannelError.inappropriateOperationForState
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(
                        ControlDeadlineHandler(requestTimeout: settings.requestTimeout, idleTimeout: settings.idleTimeout),
                        position: .first)
                    try channel.pipeline.syncOperations.addHandler(
                        ControlConnection(api: api, peer: peer, registry: registry, logger: logger))
                }.flatMapErrorThrowing { error in
                    // Said, so a client that saw its connection closed at once can be told why.
                    logger.debug("control API: a connection is not served: \(error)")
                    throw error
                }
            }
        do {
            channel = try await bootstrap.withBoundSocket(listener.descriptor).get()
        } catch {
            // The channel owns the descriptor once made, and closes it on failure: not closed again here.
            unlink(path)
            try? await loops.shutdownGracefully()
            throw UploadQueueError(.io, "cannot serve the control API: \(error)", path: path)
        }
        self.path = path
        self.loops = loops
        self.registry = registry
        socketFile = (listener.device, listener.inode)
    }

    /// Stops accepting, closes every connection (a long poll ends with it), waits for the answers under way, and
    /// removes the socket file.
    func stop() async {
        try? await channel.close()
        await registry.closeAll(waiting: .seconds(5))
        try? await loops.shutdownGracefully()
        if UnixListener.isStill(path, device: socketFile.device, inode: socketFile.inode) { unlink(path) }
    }
}

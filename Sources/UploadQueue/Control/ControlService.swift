import Logging
import ServiceLifecycle

/// The control API as a `Service`: binds its socket when it starts, serves until the group's graceful shutdown, then
/// stops accepting, closes every connection and waits for the answers under way.
///
/// A socket that cannot be served (a path too long, a group that does not exist) is said in the log and the queue
/// runs on without it; `onListening` is called either way, once, when the API listens or is known not to.
struct ControlService: Service {
    let path: String
    let settings: Configuration.ControlSettings
    let api: ControlAPI
    let logger: Logger
    let onListening: @Sendable () -> Void

    func run() async {
        let server: ControlServer?
        do {
            server = try await ControlServer(path: path, settings: settings, api: api, logger: logger)
        } catch {
            logger.warning("no control API: \(error)")
            server = nil
        }
        onListening()
        try? await gracefulShutdown()
        await server?.stop()
    }
}

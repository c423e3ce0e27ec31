// nio-rufh-server PORT STORE_DIR
//
// An HTTP/1.1 server on 127.0.0.1:PORT speaking IETF Resumable Uploads for HTTP through swift-nio-extras'
// NIOResumableUpload (interop versions 3, 5 and 6 of draft-ietf-httpbis-resumable-upload), for interop tests
// of uploadq's client.
//
//   POST /files/   with Upload-Draft-Interop-Version and Upload-Complete: creates an upload; resumption URLs
//                  are http://127.0.0.1:PORT/resumable_upload/<token> (HEAD, PATCH, DELETE there).
//                  On completion the body is in STORE_DIR/<n> and the answer is 200 {"size", "sha256", "file"}.
//   GET /health    200 {"status": "ok"}
//
// Environment: NIO_RUFH_THREADS (event loops, default 1), NIO_RUFH_ORIGIN (prefix of Location, default
// "http://127.0.0.1:PORT"; set it to "" for relative Locations), NIO_RUFH_TIMEOUT (seconds an interrupted
// upload waits for a resumption, default 3600).

import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix
import NIOResumableUpload

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

let arguments = CommandLine.arguments
guard arguments.count == 3, let port = Int(arguments[1]), (0...65535).contains(port) else {
    logLine("usage: nio-rufh-server PORT STORE_DIR")
    exit(2)
}
let environment: [String: String] = {
    var result: [String: String] = [:]
    var pointer = environ
    while let entry = pointer.pointee {
        let pair = String(cString: entry)
        if let equals = pair.firstIndex(of: "=") {
            result[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        pointer += 1
    }
    return result
}()

let store = try UploadStore(directory: arguments[2])
let threads = environment["NIO_RUFH_THREADS"].flatMap(Int.init) ?? 1
let timeoutSeconds = environment["NIO_RUFH_TIMEOUT"].flatMap(Int64.init) ?? 3600

// The context needs the origin, which for PORT 0 is known only after binding; connections cannot arrive
// before "listening on" is printed, so it is filled in right after bind.
let uploadContextBox = NIOLockedValueBox<HTTPResumableUploadContext?>(nil)

let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, threads))
let server = try ServerBootstrap(group: group)
    .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            guard let uploadContext = uploadContextBox.withLockedValue({ $0 }) else {
                throw ChannelError.ioOnClosedChannel
            }
            let sync = channel.pipeline.syncOperations
            try sync.configureHTTPServerPipeline()
            try sync.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try sync.addHandler(ExpectContinueHandler())
            // A fresh StoreHandler for every logical request (the `handlers:` initialiser would put the same
            // instances into the child channel of every request on a kept-alive connection).
            try sync.addHandler(
                HTTPResumableUploadHandler(context: uploadContext) { child in
                    try? child.pipeline.syncOperations.addHandler(StoreHandler(store: store))
                }
            )
        }
    }
    .bind(host: "127.0.0.1", port: port)
    .wait()

let boundPort = server.localAddress?.port ?? port
let origin = environment["NIO_RUFH_ORIGIN"] ?? "http://127.0.0.1:\(boundPort)"
uploadContextBox.withLockedValue {
    $0 = HTTPResumableUploadContext(origin: origin, timeout: .seconds(timeoutSeconds))
}

logLine("nio-rufh-server: store \(store.directory), origin \"\(origin)\", \(max(1, threads)) event loop(s)")
let ready = Array("listening on \(boundPort)\n".utf8)
ready.withUnsafeBytes { _ = write(1, $0.baseAddress!, $0.count) }

try server.closeFuture.wait()

import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes a line to stderr unbuffered (the log of the server; stdout carries only "listening on PORT").
func logLine(_ message: String) {
    let line = Array((message + "\n").utf8)
    line.withUnsafeBytes { raw in
        var offset = 0
        while offset < raw.count {
            let written = write(2, raw.baseAddress! + offset, raw.count - offset)
            if written <= 0 { return }
            offset += written
        }
    }
}

/// Where finished uploads go: `STORE_DIR/<n>`, n increasing from one past the largest number already there.
/// While an upload is under way its bytes are in `STORE_DIR/<n>.part`; it is renamed on completion, so a
/// file named by a bare number is always a complete upload.
final class UploadStore: Sendable {
    let directory: String
    private let next: NIOLockedValueBox<Int>

    init(directory: String) throws {
        self.directory = directory.hasSuffix("/") && directory.count > 1 ? String(directory.dropLast()) : directory
        mkdir(self.directory, 0o755)
        guard let dir = opendir(self.directory) else {
            throw StoreError.cannotOpenDirectory(self.directory, errno)
        }
        defer { closedir(dir) }
        var largest = 0
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if let number = Int(name), number > largest {
                largest = number
            }
        }
        self.next = NIOLockedValueBox(largest + 1)
    }

    func reserveNumber() -> Int {
        self.next.withLockedValue { value in
            defer { value += 1 }
            return value
        }
    }
}

enum StoreError: Error {
    case cannotOpenDirectory(String, Int32)
    case open(String, Int32)
    case write(Int32)
    case rename(Int32)
}

/// The application handler: one instance per logical request, living in the child channel that
/// `HTTPResumableUploadHandler` creates. For a resumable upload it sees a single plain request (the creation
/// request's head with the upload headers stripped, every appended byte as body, and `.end` once the upload is
/// complete), whatever number of connections and PATCH requests the client used.
final class StoreHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private enum State {
        case idle
        case storing(fd: Int32, number: Int, size: Int64, digest: SHA256)
        case failed(HTTPResponse.Status, String)
        case health
        case reject(HTTPResponse.Status, String)
        case done
    }

    private let store: UploadStore
    private var state: State = .idle

    init(store: UploadStore) {
        self.store = store
    }

    private func partPath(_ number: Int) -> String { "\(self.store.directory)/\(number).part" }
    private func finalPath(_ number: Int) -> String { "\(self.store.directory)/\(number)" }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let request):
            self.receiveHead(request)
        case .body(let buffer):
            self.receiveBody(buffer)
        case .end:
            self.receiveEnd(context: context)
        }
    }

    private func receiveHead(_ request: HTTPRequest) {
        let path = request.path ?? "/"
        let pathOnly = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        logLine("request \(request.method) \(path)")
        switch (request.method, pathOnly) {
        case (.get, "/health"), (.head, "/health"), (.options, _):
            // OPTIONS: NIOResumableUpload adds `Upload-Limit: min-size=0` to this answer when the request
            // carries Upload-Draft-Interop-Version.
            self.state = .health
        case (.post, _) where pathOnly == "/files" || pathOnly.hasPrefix("/files/"):
            let number = self.store.reserveNumber()
            let part = self.partPath(number)
            let fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            if fd < 0 {
                let err = errno
                logLine("upload \(number): cannot open \(part): errno \(err)")
                self.state = .failed(.internalServerError, "cannot open \(part): errno \(err)")
            } else {
                logLine("upload \(number): started, writing \(part)")
                self.state = .storing(fd: fd, number: number, size: 0, digest: SHA256())
            }
        default:
            if pathOnly == "/health" || pathOnly == "/files" || pathOnly.hasPrefix("/files/") {
                self.state = .reject(.methodNotAllowed, "method not allowed")
            } else {
                self.state = .reject(.notFound, "not found")
            }
        }
    }

    private func receiveBody(_ buffer: ByteBuffer) {
        guard case .storing(let fd, let number, var size, var digest) = self.state else {
            return  // a body for anything but an upload is dropped
        }
        self.state = .idle  // let `digest` be uniquely referenced while it is updated
        var failure: Int32? = nil
        buffer.withUnsafeReadableBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                offset += written
            }
            digest.update(raw)
        }
        if let failure {
            logLine("upload \(number): write failed: errno \(failure)")
            close(fd)
            unlink(self.partPath(number))
            self.state = .failed(.internalServerError, "write failed: errno \(failure)")
            return
        }
        size += Int64(buffer.readableBytes)
        self.state = .storing(fd: fd, number: number, size: size, digest: digest)
    }

    private func receiveEnd(context: ChannelHandlerContext) {
        switch self.state {
        case .storing(let fd, let number, let size, var digest):
            self.state = .done
            let closed = close(fd)
            if closed != 0 || rename(self.partPath(number), self.finalPath(number)) != 0 {
                let err = errno
                unlink(self.partPath(number))
                logLine("upload \(number): cannot finish: errno \(err)")
                self.respond(context: context, status: .internalServerError, json: "{\"error\": \"errno \(err)\"}")
                return
            }
            let hex = digest.finalizeHex()
            logLine("upload \(number): complete, \(size) bytes, sha256 \(hex), stored as \(self.finalPath(number))")
            self.respond(
                context: context,
                status: .ok,
                json: "{\"size\": \(size), \"sha256\": \"\(hex)\", \"file\": \"\(number)\"}"
            )
        case .failed(let status, let message):
            self.state = .done
            self.respond(context: context, status: status, json: "{\"error\": \"\(message)\"}")
        case .health:
            self.state = .done
            self.respond(context: context, status: .ok, json: "{\"status\": \"ok\"}")
        case .reject(let status, let message):
            self.state = .done
            self.respond(context: context, status: status, json: "{\"error\": \"\(message)\"}")
        case .idle, .done:
            self.state = .done
            self.respond(context: context, status: .badRequest, json: "{\"error\": \"unexpected end\"}")
        }
    }

    private func respond(context: ChannelHandlerContext, status: HTTPResponse.Status, json: String) {
        let body = ByteBuffer(string: json + "\n")
        var response = HTTPResponse(status: status)
        response.headerFields[.contentType] = "application/json"
        response.headerFields[.contentLength] = "\(body.readableBytes)"
        context.write(self.wrapOutboundOut(.head(response)), promise: nil)
        context.write(self.wrapOutboundOut(.body(body)), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// The upload was abandoned: cancelled by DELETE, timed out waiting for a resumption, or a conflicting
    /// append destroyed it. Drop the partial file.
    private func abandon(reason: String) {
        if case .storing(let fd, let number, let size, _) = self.state {
            close(fd)
            unlink(self.partPath(number))
            logLine("upload \(number): abandoned after \(size) bytes (\(reason)); partial file removed")
        }
        self.state = .done
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        self.abandon(reason: "\(error)")
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.abandon(reason: "channel closed")
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.abandon(reason: "handler removed")
    }
}

/// Answers `Expect: 100-continue` with `100 Continue` (libcurl sends the expectation for bodies over 1 MiB
/// and would otherwise wait a second per request). It sits between the HTTP/1 codec and
/// `HTTPResumableUploadHandler`, which neither sends 100 Continue nor forwards PATCH heads to the
/// application. The head is passed on first; if that already produced a final response (400 for a malformed
/// request, 404 for an unknown upload, 409 for a wrong offset) no 100 is sent.
final class ExpectContinueHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private var finalResponseStarted = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var request) = self.unwrapInboundIn(data),
            let expect = request.headerFields[.expect], expect.lowercased() == "100-continue"
        else {
            if case .head = self.unwrapInboundIn(data) {
                self.finalResponseStarted = false
            }
            context.fireChannelRead(data)
            return
        }
        request.headerFields[.expect] = nil
        self.finalResponseStarted = false
        context.fireChannelRead(self.wrapInboundOut(.head(request)))
        if !self.finalResponseStarted {
            context.writeAndFlush(self.wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .head(let response) = self.unwrapOutboundIn(data), response.status.kind != .informational {
            self.finalResponseStarted = true
        }
        context.write(data, promise: promise)
    }
}

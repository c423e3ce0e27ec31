import Foundation

/// A request to the control API, as the HTTP server hands it over: method, path, query, the headers it reads, and
/// the body.
package struct ControlRequest: Sendable, Equatable {
    package var method: String
    /// The path without its query, percent-decoded.
    package var path: String
    package var query: [String: String]
    /// The `Idempotency-Key` header, if sent.
    package var idempotencyKey: String?
    /// The `Accept` header, if sent (`text/event-stream` asks the event stream for server-sent events).
    package var accept: String?
    /// The `Last-Event-ID` header, if sent: where a server-sent event stream resumes.
    package var lastEventID: String?
    package var body: Data

    package init(method: String, path: String, query: [String: String] = [:], idempotencyKey: String? = nil,
                 accept: String? = nil, lastEventID: String? = nil, body: Data = Data()) {
        self.method = method
        self.path = path
        self.query = query
        self.idempotencyKey = idempotencyKey
        self.accept = accept
        self.lastEventID = lastEventID
        self.body = body
    }

    /// A request from its target (`/v1/jobs?state=failed`): the path and the query's pairs, percent-decoded.
    package init(method: String, target: String, idempotencyKey: String?, accept: String? = nil,
                 lastEventID: String? = nil, body: Data) {
        let components = URLComponents(string: target)
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        self.init(method: method, path: components?.percentEncodedPath.removingPercentEncoding ?? target,
                  query: query, idempotencyKey: idempotencyKey, accept: accept, lastEventID: lastEventID, body: body)
    }
}

/// What the control API answers: a status code and a JSON body (or none), or a body streamed as it comes.
package struct ControlReply: Sendable, Equatable {
    package var status: Int
    package var body: Data
    /// Extra headers (`Allow` on a 405).
    package var headers: [(String, String)] = []
    /// A body written as it comes, after `body` (the event stream); nil for a whole reply.
    package var stream: ControlStream?
    /// Called once the reply has gone to the socket, or the connection went before it could: what was held for it
    /// (a dropper's listing slot) is given back then, not when it was built.
    package var written: (@Sendable () -> Void)?

    package init(status: Int, body: Data, headers: [(String, String)] = [], stream: ControlStream? = nil) {
        self.status = status
        self.body = body
        self.headers = headers
        self.stream = stream
    }

    package static func == (lhs: ControlReply, rhs: ControlReply) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body && lhs.headers.elementsEqual(rhs.headers, by: ==)
            && (lhs.stream == nil) == (rhs.stream == nil)
    }

    /// A JSON document (an object or an array of them), with the CLI's escaping of control characters.
    package static func json(_ status: Int, _ value: Any) -> ControlReply {
        let data = (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data("{}".utf8)
        return ControlReply(status: status, body: ContractJSON.escapingControls(data))
    }

    /// No content (an acknowledgement).
    package static let noContent = ControlReply(status: 204, body: Data())

    /// An error: `{"error": {"code": …, "message": …}}`, the code one of `UploadQueueError.Code`'s or the API's own
    /// (`not-found`, `method-not-allowed`, `bad-request`, `forbidden`, `conflict`, `payload-too-large`,
    /// `permission-denied`, `too-many-requests`).
    package static func error(_ status: Int, _ code: String, _ message: String) -> ControlReply {
        json(status, ["error": ["code": code, "message": message]])
    }

    /// The reply for a queue error: its code, and the status that fits it.
    package static func error(_ error: UploadQueueError) -> ControlReply {
        let status = switch error.code {
        case .jobNotFound: 404
        case .invalidTransition: 409
        case .fileNotFound, .notRegularFile, .symbolicLink, .unknownDestination, .invalidArgument, .configuration,
             .sourceChanged, .unknownPrerequisite: 422
        case .groupClosed: 409
        case .groupNotFound: 404
        case .sourceUnstable, .interrupted: 409
        case .diskLow: 507
        case .ownerQuota: 429
        case .forbidden: 403
        default: 500
        }
        return json(status, ["error": ["code": error.code.rawValue, "message": error.description]])
    }
}

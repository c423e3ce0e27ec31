/// One HTTP exchange for the transfer engine: method, URL, headers, body and how to watch the connection.
struct HTTPRequest: Sendable {
    var method: String
    var url: String
    /// Header fields in order; a field with an empty value is sent as `Name:` (libcurl then drops its default).
    var headers: [HTTPHeader]
    var body: RequestBody
    var options: TransferOptions

    init(method: String, url: String, headers: [HTTPHeader] = [], body: RequestBody = .empty,
         options: TransferOptions = TransferOptions()) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.options = options
    }
}

/// One header field.
struct HTTPHeader: Sendable, Equatable {
    var name: String
    var value: String

    init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// Whether the field's name is `other`, ignoring ASCII case (names are ASCII tokens, RFC 9110 §5.1): a byte
    /// comparison, where Foundation's case-insensitive compare cost every answer a few microseconds per field.
    func hasName(_ other: String) -> Bool {
        guard name.utf8.count == other.utf8.count else { return false }
        return zip(name.utf8, other.utf8).allSatisfy { Self.lower($0) == Self.lower($1) }
    }

    private static func lower(_ byte: UInt8) -> UInt8 {
        (65...90).contains(byte) ? byte + 32 : byte
    }
}

/// Connection settings of one request, taken from its destination.
struct TransferOptions: Sendable, Equatable {
    /// Longest wait for the TCP and TLS handshake.
    var connectTimeout: Duration = .seconds(15)
    /// A transfer slower than `minimumRate` bytes/s for `window` is a stall and is aborted.
    var stall: StallDetection = StallDetection()
    /// A PEM bundle of extra CAs to trust (TLS is always verified).
    var caFile: String?
    /// Whether the request body counts against the shared send-rate cap.
    var paced: Bool = true
    /// Response bodies are kept up to this many bytes (for error messages and XML replies); the rest is dropped.
    var maximumResponseBody: Int = 1 << 20
    /// Under which name the engine counts the body bytes sent (the destination's), for traffic accounting.
    var trafficLabel: String?
    /// Refuse the request when libcurl connects to a loopback, private or link-local peer (`PrivateAddress`): a
    /// URL a server chose, for a destination that is not itself there.
    var refusesPrivatePeers = false

    /// Defaults, then a destination's timeouts, stall rule and CAs.
    init(_ settings: HTTPSettings? = nil, paced: Bool = true, trafficLabel: String? = nil) {
        self.trafficLabel = trafficLabel
        if let settings {
            connectTimeout = settings.connectTimeout
            stall = settings.stall
            caFile = settings.caFile
        }
        self.paced = paced
    }
}

extension Destination {
    /// When a transfer counts as stalled: below `minimumRate` bytes per second for `window` (it stopped), or below
    /// `minimumAverageRate` on average over `averageWindow` or past its deadline (it trickles: `RateFloor`).
    public struct StallDetection: Sendable, Equatable {
        /// Bytes per second below which a transfer is not moving (`stall_min_rate`).
        public var minimumRate: Int64
        /// How long it may stay below `minimumRate` (`stall_timeout`).
        public var window: Duration
        /// The least average rate over `averageWindow`, sent and received together (`min_rate`; 0 turns it off).
        public var minimumAverageRate: Int64
        /// `min_rate_window`.
        public var averageWindow: Duration

        /// Below 1 byte/s for 30 s, or below 1 KiB/s on average over 60 s, by default.
        public init(minimumRate: Int64 = 1, window: Duration = .seconds(30), minimumAverageRate: Int64 = 1024,
                    averageWindow: Duration = .seconds(60)) {
            self.minimumRate = minimumRate
            self.window = window
            self.minimumAverageRate = minimumAverageRate
            self.averageWindow = averageWindow
        }
    }
}

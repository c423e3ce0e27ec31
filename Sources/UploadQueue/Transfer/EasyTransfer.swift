import CCurlShim
import Foundation
import Synchronization

/// One exchange in flight: its libcurl easy handle, body reader, and the response as it arrives.
///
/// Made by the caller, then owned by the engine thread (handed over through the engine's locked inbox); only
/// `cancel()` is called from other threads, and it only sets a flag the progress callback reads.
final class EasyTransfer: @unchecked Sendable {
    let request: HTTPRequest
    private let progress: (@Sendable (Int64) -> Void)?
    private let traffic: TrafficCounter?
    private let cancelled = Atomic<Bool>(false)
    /// Set by the caller before the transfer is submitted; resumed once by the engine thread.
    var continuation: CheckedContinuation<Result<HTTPResponse, TransferError>, Never>?

    private(set) var handle: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let reader: RequestBodyReader
    private var responseHeaders: [HTTPHeader] = []
    /// The status of the response whose header fields `responseHeaders` holds (a 1xx until the final one).
    private var headerBlockStatus = 0
    /// The `Location` of the last `104 Upload Resumption Supported` (`HTTPResponse.resumptionLocation`).
    private var resumptionLocation: String?
    private var responseBody: [UInt8] = []
    private var lastReportedSent: Int64 = -1
    private let errorBuffer: UnsafeMutablePointer<CChar>
    /// The slowest this exchange may go (`min_rate`); set when its handle is made.
    private var floor: RateFloor?
    /// Why the floor ended it, if it did.
    private var belowFloor: RateFloor.Verdict?
    /// Header bytes received (libcurl counts only the body's): a server that trickles its answer is moving.
    private var receivedHeaderBytes: Int64 = 0
    /// Sends and connections libcurl made for this request, and the failure it recovered from by resending.
    private var resend = SilentResend()
    /// The private peer the request was refused at (`TransferOptions.refusesPrivatePeers`).
    private var refusedPeer: String?
    /// This exchange's share of the send-rate cap (0: none), which the rate floor judges it by.
    private var sendSpeed: Int64 = 0
    /// This exchange's share of the send cap, which its body reads take from (set by the engine for paced uploads).
    var pacer: SendPacer?
    /// Whether its read callback paused it for the cap (the engine loop resumes it).
    private(set) var isPausedForCap = false
    /// Whether its body is being read: from the first read to the last byte. Only those share the cap (one still
    /// connecting, or waiting for a connection another request is making, does not hold back the others).
    private(set) var isSendingBody = false
    /// Set when `isSendingBody` changed, until the engine split the cap again.
    var sendingChanged = false
    /// The exchanges in flight with this one (set by the engine): they share the link, and the rate floor.
    private var sharers = 1

    /// Notes how many exchanges are in flight, this one included.
    func setSharers(_ count: Int) { sharers = max(1, count) }

    init(request: HTTPRequest, progress: (@Sendable (Int64) -> Void)?, traffic: TrafficCounter? = nil) {
        self.request = request
        self.progress = progress
        self.traffic = traffic
        reader = RequestBodyReader(request.body)
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit {
        releaseHandle()
        errorBuffer.deallocate()
    }

    var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

    func cancel() {
        cancelled.store(true, ordering: .relaxed)
    }

    /// Whether this exchange sends a body under the shared send-rate cap.
    var isPacedUpload: Bool { request.options.paced && reader.length > 0 }

    /// Notes this exchange's share of the send cap (the pacer enforces the cap; the floor judges by the share).
    func setSendSpeed(_ bytesPerSecond: Int64) {
        sendSpeed = bytesPerSecond
    }

    /// Resumes an exchange its read callback paused for the cap (libcurl may read again at once).
    func resumeForCap() {
        guard isPausedForCap, let handle else { return }
        isPausedForCap = false
        _ = uploadq_curl_unpause(handle)
    }

    func complete(_ result: Result<HTTPResponse, TransferError>) {
        let continuation = self.continuation
        self.continuation = nil
        continuation?.resume(returning: result)
    }

    /// The result of a finished exchange from libcurl's code and what arrived.
    func outcome(_ code: CURLcode) -> Result<HTTPResponse, TransferError> {
        guard let handle else {
            return .failure(TransferError(code: .other, message: "transfer without a handle", curlCode: nil))
        }
        var status = 0
        _ = uploadq_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var sent: curl_off_t = 0
        _ = uploadq_curl_getinfo_offset(handle, CURLINFO_SIZE_UPLOAD_T, &sent)
        // The request line and headers went out too (a probe, a HEAD, a listing are nothing else): a metered
        // budget counts them.
        var requestHeaderBytes = 0
        _ = uploadq_curl_getinfo_long(handle, CURLINFO_REQUEST_SIZE, &requestHeaderBytes)
        if let label = request.options.trafficLabel { traffic?.add(label, requestHeaderBytes) }
        let response = HTTPResponse(status: status, headers: responseHeaders, body: responseBody, bytesSent: Int64(sent),
                                    resumptionLocation: resumptionLocation)
        if code != CURLE_OK {
            if let refusedPeer {
                return .failure(TransferError(code: .privateTarget, message: """
                    refused: \(URLRedaction.redact(request.url)) is at \(refusedPeer), a loopback, private or \
                    link-local address, and the server chose it (the destination is not there itself); if that is \
                    meant, set allow_private_targets = true on the destination
                    """, curlCode: Int(code.rawValue)))
            }
            if let failure = reader.failure {
                return .failure(TransferError(code: reader.failureIsIO ? .sourceIO : .sourceRead, message: failure,
                                              curlCode: Int(code.rawValue)))
            }
            // A server that refuses a body early (413, 401, 409…) may close the connection before it was all
            // sent: its answer is what counts, not the broken send.
            if status >= 400, [CURLE_SEND_ERROR, CURLE_RECV_ERROR].contains(code), !isCancelled {
                return .success(response)
            }
            if let belowFloor, !isCancelled {
                return .failure(TransferError(code: .stall, message: Self.describe(belowFloor, url: request.url),
                                              curlCode: Int(code.rawValue)))
            }
            if isCancelled {
                return .failure(TransferError(code: .cancelled, message: "cancelled", curlCode: Int(code.rawValue)))
            }
            let detail = String(cString: errorBuffer)
            return .failure(TransferError(curlCode: code, detail: detail, url: request.url, resend: resend,
                                          stall: request.options.stall))
        }
        return .success(response)
    }

    /// Builds the easy handle for the request; nil if libcurl cannot allocate one. `capped` says a send-rate cap
    /// is in force: libcurl then sends its upload buffer in bursts, and a small buffer keeps a small share of the
    /// cap from looking like a stall. Otherwise libcurl's own 64 KiB: larger reads cost more CPU, not less (the
    /// buffer no longer stays in the CPU's cache between the read from the file and the send; measured on a 1 GiB
    /// PUT, 512 KiB pieces took twice the system time).
    func makeHandle(capped: Bool) -> UnsafeMutableRawPointer? {
        guard let handle = curl_easy_init() else { return nil }
        self.handle = handle
        let options = request.options
        let this = Unmanaged.passUnretained(self).toOpaque()
        _ = uploadq_curl_setopt_string(handle, CURLOPT_URL, request.url)
        _ = uploadq_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = uploadq_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = uploadq_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = uploadq_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
        _ = uploadq_curl_setopt_long(handle, CURLOPT_PIPEWAIT, 1)
        _ = uploadq_curl_setopt_string(handle, CURLOPT_USERAGENT, "uploadq/\(UploadQueueVersion.current)")
        _ = uploadq_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(options.connectTimeout.milliseconds))
        _ = uploadq_curl_setopt_long(handle, CURLOPT_LOW_SPEED_LIMIT, Int(options.stall.minimumRate))
        _ = uploadq_curl_setopt_long(handle, CURLOPT_LOW_SPEED_TIME, max(1, Int(options.stall.window.milliseconds / 1000)))
        floor = RateFloor(minimumRate: options.stall.minimumAverageRate, window: options.stall.averageWindow,
                          bodyBytes: reader.length, started: .now)
        if let caFile = options.caFile {
            // The private CA's bundle replaces the default bundle file; the system's CA directory stays trusted.
            _ = uploadq_curl_setopt_string(handle, CURLOPT_CAINFO, caFile)
            if FileManager.default.fileExists(atPath: "/etc/ssl/certs") {
                _ = uploadq_curl_setopt_string(handle, CURLOPT_CAPATH, "/etc/ssl/certs")
            }
        }
        if capped && reader.length > 0 {
            _ = uploadq_curl_setopt_long(handle, CURLOPT_UPLOAD_BUFFERSIZE, 16 * 1024)
        }
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_PRIVATE, this)

        _ = uploadq_curl_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION, easyHeaderCallback)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, this)
        _ = uploadq_curl_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, easyWriteCallback)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, this)
        _ = uploadq_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0)
        _ = uploadq_curl_setopt_xferinfo_callback(handle, easyProgressCallback)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, this)
        _ = uploadq_curl_setopt_sockopt_callback(handle, easySocketCallback)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_SOCKOPTDATA, this)
        _ = uploadq_curl_setopt_prereq_callback(handle, easyRequestCallback)
        _ = uploadq_curl_setopt_pointer(handle, CURLOPT_PREREQDATA, this)

        var fields = request.headers
        let method = request.method.uppercased()
        switch method {
        case "HEAD":
            _ = uploadq_curl_setopt_long(handle, CURLOPT_NOBODY, 1)
        case "GET":
            break
        case "PUT", "POST", "PATCH":
            // Every body goes through the read callback with a known length: never chunked encoding.
            _ = uploadq_curl_setopt_long(handle, CURLOPT_UPLOAD, 1)
            _ = uploadq_curl_setopt_offset(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(reader.length))
            _ = uploadq_curl_setopt_data_callback(handle, CURLOPT_READFUNCTION, easyReadCallback)
            _ = uploadq_curl_setopt_pointer(handle, CURLOPT_READDATA, this)
            _ = uploadq_curl_setopt_seek_callback(handle, easySeekCallback)
            _ = uploadq_curl_setopt_pointer(handle, CURLOPT_SEEKDATA, this)
            if method != "PUT" { _ = uploadq_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method) }
            // `Expect: 100-continue` costs a round trip (up to 1 s with servers that ignore it) per chunk.
            if !fields.contains(where: { $0.hasName("Expect") }) {
                fields.append(HTTPHeader("Expect", ""))
            }
        default:
            _ = uploadq_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method)
        }
        for field in fields {
            let line = field.value.isEmpty ? "\(field.name):" : "\(field.name): \(field.value)"
            headerList = curl_slist_append(headerList, line)
        }
        if let headerList { _ = uploadq_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList) }
        return handle
    }

    /// Frees the easy handle and header list (after the handle left the multi handle).
    func releaseHandle() {
        if let handle {
            curl_easy_cleanup(handle)
            self.handle = nil
        }
        if let headerList {
            curl_slist_free_all(headerList)
            self.headerList = nil
        }
    }

    // MARK: libcurl callbacks (engine thread)

    fileprivate func readBody(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        if isCancelled { return uploadq_curl_readfunc_abort() }
        if !isSendingBody && reader.length > 0 {
            isSendingBody = true
            sendingChanged = true
        }
        var capacity = capacity
        if let pacer {
            capacity = pacer.take(capacity)
            if capacity == 0 {
                isPausedForCap = true
                return uploadq_curl_readfunc_pause()
            }
        }
        guard let count = reader.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: capacity)) else {
            return uploadq_curl_readfunc_abort()
        }
        if let label = request.options.trafficLabel { traffic?.add(label, count) }
        if count == 0 && isSendingBody {
            isSendingBody = false
            sendingChanged = true
        }
        return count
    }

    fileprivate func seekBody(to offset: Int64, origin: Int32) -> Int32 {
        guard origin == SEEK_SET, reader.seek(to: offset) else { return uploadq_curl_seekfunc_fail() }
        return uploadq_curl_seekfunc_ok()
    }

    fileprivate func socketOpened() {
        if resend.socketOpened() { keepRecoveredFailure() }
    }

    /// Whether the request may go to `peer` (the connected address); called just before it does.
    fileprivate func requestGoesOut(to peer: String) -> Bool {
        if request.options.refusesPrivatePeers, PrivateAddress.contains(peer) {
            refusedPeer = peer
            return false
        }
        if resend.requestGoingOut() { keepRecoveredFailure() }
        return true
    }

    /// libcurl is resending the request: the error text so far is the failure it recovers from. Cleared, so that
    /// an empty buffer at the end says libcurl wrote nothing for what ended the request.
    private func keepRecoveredFailure() {
        resend.recover(String(cString: errorBuffer))
        errorBuffer[0] = 0
    }

    fileprivate func receiveHeader(_ buffer: UnsafeMutablePointer<CChar>, length: Int) {
        receivedHeaderBytes += Int64(length)
        // Read from the bytes: every response passes here, and Foundation's trimming cost more than the request.
        let line = Self.trimmed(UnsafeRawBufferPointer(start: buffer, count: length)[...])
        if line.starts(with: "HTTP/".utf8) {
            // A new status line: interim (1xx) or redirect headers before it do not belong to the final answer; a
            // `104 Upload Resumption Supported` names the upload a RUFH creation makes, and that is kept apart.
            if headerBlockStatus == 104, let location = responseHeaders.first(where: { $0.hasName("Location") }) {
                resumptionLocation = location.value
            }
            responseHeaders.removeAll()
            headerBlockStatus = Self.statusCode(line)
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = Self.trimmed(line[..<colon])
        let value = Self.trimmed(line[(colon + 1)...])
        responseHeaders.append(HTTPHeader(String(decoding: name, as: UTF8.self),
                                          String(decoding: value, as: UTF8.self)))
    }

    /// The three-digit status code of a status line (`HTTP/1.1 104 Upload Resumption Supported`, `HTTP/2 200`);
    /// 0 when there is none.
    static func statusCode(_ line: Slice<UnsafeRawBufferPointer>) -> Int {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return 0 }
        let digits = line[(space + 1)...].prefix(3)
        guard digits.count == 3, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return 0
        }
        return digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
    }

    /// `bytes` without the spaces, tabs and line ends around them (RFC 9110 §5.6.3 optional whitespace, and the
    /// header line's CRLF).
    private static func trimmed(_ bytes: Slice<UnsafeRawBufferPointer>) -> Slice<UnsafeRawBufferPointer> {
        func blank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, blank(bytes[start]) { start += 1 }
        while end > start, blank(bytes[end - 1]) { end -= 1 }
        return bytes[start..<end]
    }

    fileprivate func receiveBody(_ buffer: UnsafeMutablePointer<CChar>, length: Int) {
        let room = request.options.maximumResponseBody - responseBody.count
        guard room > 0 else { return }
        let bytes = UnsafeRawBufferPointer(start: buffer, count: min(room, length))
        responseBody.append(contentsOf: bytes)
    }

    /// The stall message for an exchange the rate floor ended.
    private static func describe(_ verdict: RateFloor.Verdict, url: String) -> String {
        switch verdict {
        case .tooSlow(let bytes, let span, let floor):
            return "\(URLRedaction.redact(url)): \(bytes) bytes in the last \(span.components.seconds) s, below the "
                + "floor of \(ByteCountText.text(floor))/s (min_rate); the slot is given back and the transfer retried"
        case .pastDeadline(let allowance):
            return "\(URLRedaction.redact(url)): not done after \(allowance.components.seconds) s (ten minutes, and its "
                + "body's size at the floor of min_rate); the slot is given back and the transfer retried"
        }
    }

    fileprivate func reportProgress(sent: Int64, received: Int64) -> Int32 {
        if isCancelled { return 1 }
        if let verdict = floor?.observe(bytes: sent + received + receivedHeaderBytes, at: .now,
                                        sendingBody: sent < reader.length, cap: sendSpeed, sharers: sharers) {
            belowFloor = verdict
            return 1
        }
        if sent != lastReportedSent {
            lastReportedSent = sent
            progress?(sent)
        }
        return 0
    }
}

private let easyReadCallback: uploadq_curl_data_callback = { buffer, size, count, userdata in
    guard let buffer, let userdata else { return uploadq_curl_readfunc_abort() }
    return Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().readBody(into: buffer, capacity: size * count)
}

private let easySeekCallback: uploadq_curl_seek_callback = { userdata, offset, origin in
    guard let userdata else { return uploadq_curl_seekfunc_fail() }
    return Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().seekBody(to: Int64(offset), origin: origin)
}

private let easySocketCallback: uploadq_curl_sockopt_callback = { userdata, _, _ in
    if let userdata { Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().socketOpened() }
    return uploadq_curl_sockopt_ok()
}

private let easyRequestCallback: uploadq_curl_prereq_callback = { userdata, peer, _, _, _ in
    guard let userdata else { return uploadq_curl_prereqfunc_ok() }
    let transfer = Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue()
    return transfer.requestGoesOut(to: peer.map { String(cString: $0) } ?? "")
        ? uploadq_curl_prereqfunc_ok() : uploadq_curl_prereqfunc_abort()
}

private let easyHeaderCallback: uploadq_curl_data_callback = { buffer, size, count, userdata in
    guard let buffer, let userdata else { return 0 }
    Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().receiveHeader(buffer, length: size * count)
    return size * count
}

private let easyWriteCallback: uploadq_curl_data_callback = { buffer, size, count, userdata in
    guard let buffer, let userdata else { return 0 }
    Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().receiveBody(buffer, length: size * count)
    return size * count
}

private let easyProgressCallback: uploadq_curl_xferinfo_callback = { userdata, _, downloaded, _, uploaded in
    guard let userdata else { return 0 }
    return Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue()
        .reportProgress(sent: Int64(uploaded), received: Int64(downloaded))
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        let parts = components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}

import CCurlShim

extension TransferError {
    /// Classifies a failed libcurl transfer; `detail` is libcurl's error buffer for it, less the text of a failure
    /// libcurl recovered from by resending the request, which `resend` holds; `stall` is the request's stall rule,
    /// named when libcurl left no words of its own for a stall.
    init(curlCode: CURLcode, detail: String, url: String, resend: SilentResend = SilentResend(),
         stall: StallDetection = StallDetection()) {
        let raw = Int(curlCode.rawValue)
        let summary = String(cString: curl_easy_strerror(curlCode))
        let location = URLRedaction.redact(url)
        var text = detail.isEmpty ? summary : detail
        let code: Code
        switch curlCode {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: code = .dns
        case CURLE_COULDNT_CONNECT: code = .connect
        case CURLE_OPERATION_TIMEDOUT where text.localizedCaseInsensitiveContains("too slow"):
            code = .stall
        case CURLE_OPERATION_TIMEDOUT where detail.isEmpty && resend.timeoutIsStall:
            code = .stall
            text = "the resent request stopped moving (below \(stall.minimumRate) bytes/s for "
                + "\(stall.window.milliseconds) ms: stall_min_rate, stall_timeout)"
        case CURLE_OPERATION_TIMEDOUT: code = .timeout
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM, CURLE_SSL_ISSUER_ERROR,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            code = .tlsVerification
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_SHUTDOWN_FAILED: code = .tls
        case CURLE_SEND_ERROR, CURLE_UPLOAD_FAILED: code = .send
        case CURLE_RECV_ERROR, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM: code = .receive
        case CURLE_GOT_NOTHING: code = .emptyReply
        case CURLE_WEIRD_SERVER_REPLY: code = .badReply
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL: code = .invalidURL
        case CURLE_READ_ERROR: code = .sourceRead
        case CURLE_ABORTED_BY_CALLBACK: code = .cancelled
        default: code = .other
        }
        var message: String
        switch code {
        case .stall: message = "stalled: \(text) (\(location))"
        case .tlsVerification:
            message = "TLS verification failed for \(location): \(text); if the server uses a private CA, set ca_file "
                + "on the destination"
        case .badReply: message = "the server's reply is not valid HTTP: \(text) (\(location))"
        default: message = "\(text) (\(location))"
        }
        if let recovered = resend.recovered {
            message += "; libcurl had resent the request on another connection after: \(recovered)"
        }
        self.init(code: code, message: message, curlCode: raw)
    }

    /// The same by libcurl's number for the code, for the tests: importing the shim there hides the C library's
    /// socket constants from the test files that do not import it too.
    init(curlCodeNumber: Int, detail: String, url: String, resend: SilentResend = SilentResend(),
         stall: StallDetection = StallDetection()) {
        self.init(curlCode: CURLcode(rawValue: UInt32(curlCodeNumber)), detail: detail, url: url, resend: resend,
                  stall: stall)
    }
}

import Foundation

/// What a tus server said about itself in its OPTIONS answer: versions, extensions, size limit, checksums.
struct TusServer: Sendable, Equatable {
    var versions: [String]
    var extensions: Set<String>
    var maximumSize: Int64?
    var checksumAlgorithms: [String]

    /// A server that did not answer OPTIONS: core protocol and creation only.
    static let assumed = TusServer(versions: ["1.0.0"], extensions: ["creation"], maximumSize: nil, checksumAlgorithms: [])

    init(versions: [String], extensions: Set<String>, maximumSize: Int64?, checksumAlgorithms: [String]) {
        self.versions = versions
        self.extensions = extensions
        self.maximumSize = maximumSize
        self.checksumAlgorithms = checksumAlgorithms
    }

    /// Reads the OPTIONS headers.
    init(response: HTTPResponse) {
        func list(_ name: String) -> [String] {
            (response.header(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty }
        }
        versions = list("Tus-Version")
        extensions = Set(list("Tus-Extension"))
        maximumSize = response.header("Tus-Max-Size").flatMap { Int64($0) }.flatMap { $0 > 0 ? $0 : nil }
        checksumAlgorithms = list("Tus-Checksum-Algorithm").map { $0.lowercased() }
    }

    var supportsCreationWithUpload: Bool { extensions.contains("creation-with-upload") }
    var supportsTermination: Bool { extensions.contains("termination") }
    /// `Upload-Checksum` is sent only when the server advertises the extension with SHA-1.
    var acceptsSHA1Checksums: Bool { extensions.contains("checksum") && checksumAlgorithms.contains("sha1") }
}

/// The OPTIONS answer of one tus endpoint, asked once and asked again after errors that suggest a change.
actor TusDiscovery {
    private var cached: TusServer?

    func server(_ client: DestinationClient, endpoint: String) async throws(TransferFailure) -> TusServer {
        if let cached { return cached }
        let response = try await client.send("OPTIONS", endpoint, headers: [HTTPHeader("Tus-Resumable", "1.0.0")])
        let server: TusServer
        switch response.status {
        case 200, 204:
            server = TusServer(response: response)
            guard server.versions.isEmpty || server.versions.contains("1.0.0") else {
                throw .permanent("tus-version", "the tus server at \(URLRedaction.redact(endpoint)) speaks "
                    + "\(server.versions.joined(separator: ", ")), not 1.0.0")
            }
        case 404, 405, 501:
            server = .assumed
        default:
            throw client.failure(for: response, request: "OPTIONS \(URLRedaction.redact(endpoint))")
        }
        cached = server
        return server
    }

    func forget() {
        cached = nil
    }
}

import CCurl
import Foundation
@testable import UploadQueue

/// URL and path templates, and the URL prefixes and origins the trust rules compare: a template parses or is
/// refused, and no file name or metadata value can climb out of the segment it fills.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTemplates(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let fields = FuzzInput(data, size).fields(4)
    let (template, name, value, url) = (fields[0], fields[1], fields[2], fields[3])
    let job = fuzzJob(name: name, meta: ["k": value])
    if let parsed = try? URLTemplate(template) { _ = parsed.expand(for: job) }
    if let parsed = try? PathTemplate(template) {
        _ = parsed.expand(jobID: job.id, originalName: name, sha256: "", meta: ["k": value], date: job.createdAt)
    }
    // A value fills one segment: no slash, and never a segment of its own that walks up.
    let fixed = try! URLTemplate("https://h.example.com/up/{name}/{meta.k}")
    let expanded = fixed.expand(for: job)
    // Cut at each "/" scalar, as a server cuts (a "/" before a combining mark is one Swift character).
    let segments = PathSegments.split(expanded.dropFirst("https://h.example.com/up/".count), omittingEmpty: false)
    precondition(segments.count == 2, "a value added a segment: \(expanded)")
    precondition(!segments.contains { $0 == "." || $0 == ".." }, "a value walks up: \(expanded)")
    let path = try! PathTemplate("{date}/{name}-{meta.k}")
    let file = path.expand(jobID: job.id, originalName: name, sha256: "", meta: ["k": value], date: job.createdAt)
    precondition(PathSegments.split(file, omittingEmpty: false).count == 2, "a value added a folder: \(file)")
    let fitted = FileName.fittingPath(file, under: "/srv", jobID: job.id)
    for part in PathSegments.split(fitted, omittingEmpty: true) {
        precondition(part.utf8.count <= FileName.componentLimit, "a component over 255 bytes: \(part.utf8.count)")
    }
    // The URL readers of the trust rules agree on the origin of anything a prefix admits: ours, and libcurl's,
    // which is what sends the request (a URL libcurl refuses sends nothing).
    if let prefix = PatchURLPrefix(template), prefix.admits(url) {
        let origin = URLOrigin(url: url)
        precondition(origin?.scheme == prefix.scheme && origin?.port == prefix.port,
                     "\(template) admits \(url), whose origin is \(String(describing: origin))")
        if let sent = curlOrigin(url) {
            func bare(_ host: String) -> Substring { host.drop { $0 == "[" }.prefix { $0 != "]" } }
            precondition(sent.scheme == prefix.scheme && bare(sent.host) == bare(prefix.host) && sent.port == prefix.port,
                         "\(template) admits \(url), which libcurl sends to \(sent)")
        }
    }
    return 0
}

/// The scheme, host and port libcurl reads in `url`; nil when it refuses the URL.
func curlOrigin(_ url: String) -> (scheme: String, host: String, port: Int)? {
    guard let handle = curl_url() else { return nil }
    defer { curl_url_cleanup(handle) }
    guard curl_url_set(handle, CURLUPART_URL, url, 0) == CURLUE_OK else { return nil }
    func part(_ what: CURLUPart, _ flags: UInt32 = 0) -> String? {
        var out: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, what, &out, flags) == CURLUE_OK, let out else { return nil }
        defer { curl_free(out) }
        return String(cString: out)
    }
    guard let scheme = part(CURLUPART_SCHEME), let host = part(CURLUPART_HOST),
          let port = part(CURLUPART_PORT, UInt32(CURLU_DEFAULT_PORT)).flatMap({ Int($0) }) else { return nil }
    return (scheme.lowercased(), host.lowercased(), port)
}

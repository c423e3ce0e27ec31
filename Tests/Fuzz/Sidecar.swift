import Foundation
@testable import UploadQueue

/// Spool sidecars, written by whoever can write the spool: parsed or refused with a reason, never a crash; what
/// parses is judged by the sidecar policy, which must refuse any patch URL outside the allowed prefix.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSidecar(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput(data, size)
    guard let sidecar = try? Sidecar(json: Data(input.bytes)) else { return 0 }
    var settings = PatchSettings()
    settings.allowedURLs = [PatchURLPrefix("https://api.example.com/records/")!]
    if let patch = sidecar.patch, PatchAuthority.sidecarRefusal(patch, settings: settings) == nil {
        let origin = URLOrigin(url: patch.url)
        precondition(origin == URLOrigin(url: "https://api.example.com"), "admitted off the allowed origin: \(patch.url)")
        precondition(!patch.url.contains("/../") && !patch.url.lowercased().contains("%2e"), "admitted \(patch.url)")
    }
    return 0
}

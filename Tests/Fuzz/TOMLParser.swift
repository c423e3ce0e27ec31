@testable import UploadQueue

/// The config's TOML parser: any text gives a table or a syntax error naming a line, never a crash or a hang;
/// text that parses goes through the config loader too (which must answer with a config or a keyed error).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTOML(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = FuzzInput(data, size).text
    do {
        _ = try TOMLParser.parse(text)
        _ = try? ConfigurationLoader.parse(text, file: "/etc/uploadq/fuzz.toml", baseDirectory: "/tmp")
    } catch {
        precondition(error.line >= 1, "a syntax error names a line")
    }
    return 0
}

/// Paths, keys and URL paths cut at `/` the way a file system or a server cuts them: at every U+002F scalar.
///
/// Swift's own `split` compares characters, and a `/` followed by a combining mark (a name that starts with one,
/// after a template's `/`) is one character: such a slash went uncut, and the parts measured or encoded around it
/// were not the ones the file system or the store saw (found by the templates fuzzer).
enum PathSegments {
    /// The parts of `path` between slashes.
    static func split(_ path: some StringProtocol, omittingEmpty: Bool) -> [String] {
        path.unicodeScalars.split(separator: "/", omittingEmptySubsequences: omittingEmpty)
            .map { String(String.UnicodeScalarView($0)) }
    }
}

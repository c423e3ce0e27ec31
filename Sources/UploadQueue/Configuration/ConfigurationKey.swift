/// One key of the config file as the manual documents it: its table, its type, its default, an example and its
/// meaning.
///
/// `ConfigurationReference.keys` lists every key. The loader refuses to read a key that list does not document
/// (with its type and, for integers and numbers, its range), `config show` orders its keys by it, and the
/// configuration reference (`docs/configuration.md`, `uploadq.toml(5)`) is generated from it.
package struct ConfigurationKey: Sendable {
    /// The key's value type, as written in the file.
    package enum Kind: Sendable, Equatable, CustomStringConvertible {
        /// A string.
        case text
        /// A string, one of these.
        case choice([String])
        /// A path, relative paths against the config file's folder.
        case path
        /// An http:// or https:// URL.
        case url
        /// An integer within a range.
        case integer(ClosedRange<Int64>)
        /// A number (integer or float) within a range.
        case number(ClosedRange<Double>)
        /// true or false.
        case boolean
        /// A size: a number of bytes or a text such as `"8MiB"`.
        case size
        /// A size or a percentage (`"5%"`).
        case sizeOrPercent
        /// A duration such as `"30s"`.
        case duration
        /// A duration, or `"forever"`.
        case durationOrForever
        /// A weekday name, or a day of the month within a range.
        case weekdayOrDay(ClosedRange<Int64>)
        /// An array of strings.
        case texts
        /// A program and its arguments, run without a shell.
        case command
        /// An inline table of strings.
        case headers

        /// How the reference writes the type.
        package var description: String {
            switch self {
            case .text: "string"
            case .choice(let values): "one of " + values.map { "\"\($0)\"" }.joined(separator: ", ")
            case .path: "path"
            case .url: "URL"
            case .integer(let range): "integer, \(range.lowerBound) to \(range.upperBound)"
            case .number(let range): "number, \(range.lowerBound) to \(range.upperBound)"
            case .boolean: "boolean"
            case .size: "size"
            case .sizeOrPercent: "size or percentage"
            case .duration: "duration"
            case .durationOrForever: "duration or \"forever\""
            case .weekdayOrDay(let days): "weekday, or day of the month \(days.lowerBound) to \(days.upperBound)"
            case .texts: "array of strings"
            case .command: "array: program, arguments"
            case .headers: "table of strings"
            }
        }

        /// Whether the loader may read a key of this kind with `reader`.
        func isRead(by reader: ConfigurationTable.Reader) -> Bool {
            switch (self, reader) {
            case (.text, .string), (.choice, .string), (.path, .string), (.url, .string): true
            case (.integer(let documented), .integer(let read)): documented == read
            case (.number(let documented), .float(let read)): documented == read
            case (.boolean, .boolean), (.size, .byteCount), (.sizeOrPercent, .freeSpace), (.duration, .duration): true
            case (.durationOrForever, .duration), (.durationOrForever, .string): true
            case (.weekdayOrDay, .string): true
            case (.weekdayOrDay(let documented), .integer(let read)): documented == read
            case (.texts, .stringArray), (.command, .stringArray), (.headers, .stringTable): true
            default: false
            }
        }
    }

    /// The key's default, as `config show` prints it.
    package enum Default: Sendable, Equatable {
        /// This TOML value.
        case value(String)
        /// Not set; the text says what that means.
        case unset(String)
        /// Worked out from other keys or from the machine; the text says how.
        case computed(String)
        /// The table needs it.
        case required
    }

    /// The kinds of destination a destination key applies to.
    package enum Variant: String, Sendable, CaseIterable {
        /// `protocol = "file"`: a local directory.
        case file
        /// `protocol = "tus"`.
        case tus
        /// `protocol = "rufh"`: IETF resumable uploads.
        case rufh
        /// `protocol = "http-put"` with a `url`.
        case httpPut = "http-put"
        /// `protocol = "http-post"` with a `url`.
        case httpPost = "http-post"
        /// `protocol = "s3"` with its own endpoint, bucket and keys.
        case s3
        /// `http-put` or `http-post` with `mint_url`: the app's backend mints each file's target.
        case minted
        /// `http-put` or `http-post` with `mint_command`: a program mints each file's target.
        case mintedCommand = "minted-command"
        /// `s3` with `mint_url` (Uppy Companion's routes).
        case mintedS3 = "minted-s3"

        /// Every destination with a connection of its own (all but `file`).
        package static let network: [Variant] = [.tus, .rufh, .httpPut, .httpPost, .s3, .minted, .mintedCommand,
                                                 .mintedS3]
    }

    /// The table: `""` for the top level, `"limits"`, or `"destinations.NAME"` for every destination.
    package let table: String
    /// The key's name in its table.
    package let name: String
    /// The type of its value.
    package let kind: Kind
    /// What holds when the file does not set it.
    package let defaultValue: Default
    /// A TOML value for the example line `name = example`.
    package let example: String
    /// Other lines of the same table the example needs (`uploaded_copies = "keep"` for `keep_for`).
    package let exampleContext: [String]
    /// What it does, in one paragraph.
    package let meaning: String
    /// For destination keys: the kinds of destination that read it.
    package let variants: [Variant]

    /// A key of `table`; `variants` only for the keys of a destination.
    package init(_ table: String, _ name: String, _ kind: Kind, _ defaultValue: Default, example: String,
                 context: [String] = [], variants: [Variant] = [], _ meaning: String) {
        self.table = table
        self.name = name
        self.kind = kind
        self.defaultValue = defaultValue
        self.example = example
        self.exampleContext = context
        self.meaning = meaning
        self.variants = variants
    }

    /// `limits.concurrency`, `destinations.NAME.url`, `state_dir`.
    package var fullName: String { table.isEmpty ? name : table + "." + name }
}

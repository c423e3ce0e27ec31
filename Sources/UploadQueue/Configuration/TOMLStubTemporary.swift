struct TOMLValue: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case string(String), integer(Int64), float(Double), boolean(Bool), datetime(String), array([TOMLValue]), table(TOMLTable)
    }
    var kind: Kind
    var line: Int
    var typeName: String { "x" }
}
struct TOMLTable: Sendable, Equatable {
    var line: Int
    var keys: [String] { [] }
    subscript(key: String) -> TOMLValue? { nil }
}
struct TOMLSyntaxError: Error, Sendable, Equatable { var line: Int; var column: Int; var message: String }
enum TOMLParser { static func parse(_ text: String) throws(TOMLSyntaxError) -> TOMLTable { TOMLTable(line: 1) } }

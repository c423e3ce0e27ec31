import Testing
@testable import UploadQueue

/// The config file's TOML reader: every value form of TOML 1.0, line numbers, and the structural errors.
struct TOMLParserTests {
    func parse(_ text: String) throws -> TOMLTable {
        try TOMLParser.parse(text)
    }

    func failure(_ text: String) -> TOMLSyntaxError? {
        do {
            _ = try TOMLParser.parse(text)
            return nil
        } catch {
            return error
        }
    }

    func kind(_ table: TOMLTable, _ path: String) -> TOMLValue.Kind? {
        var parts = path.split(separator: ".").map(String.init)
        var current = table
        let last = parts.removeLast()
        for part in parts {
            guard case .table(let inner)? = current[part]?.kind else { return nil }
            current = inner
        }
        return current[last]?.kind
    }

    @Test("nesting past 32 levels is a syntax error naming the line, not a stack overflow (found by the fuzzer)")
    func deepNesting() throws {
        for text in ["I=" + String(repeating: "[", count: 100_000), "t=" + String(repeating: "{a=", count: 50_000),
                     "a=" + String(repeating: "[", count: 33) + String(repeating: "]", count: 33),
                     String(repeating: "k.", count: 40) + "k = 1", "[" + String(repeating: "t.", count: 40) + "t]"] {
            do {
                _ = try TOMLParser.parse("# config\n" + text)
                Issue.record("accepted \(text.prefix(40))…")
            } catch {
                #expect(error.line == 2 && (error.message.contains("32")), "\(error)")
            }
        }
        let fine = try TOMLParser.parse("a=" + String(repeating: "[", count: 32) + String(repeating: "]", count: 32))
        #expect(fine["a"] != nil)
    }

    @Test("scalars: strings, integers in every base, floats, booleans, date-times")
    func scalars() throws {
        let table = try parse(#"""
            basic = "tab\there \"q\" \u00e9 \U0001F600"
            literal = 'C:\path\*'
            hex = 0xDEAD_beef
            oct = 0o755
            bin = 0b1101
            dec = -1_000
            plus = +42
            zero = 0
            float = 3.14
            exp = 6.02e+23
            negexp = -1E-2
            underscored = 9_224.617_445
            inf = -inf
            nan = nan
            yes = true
            no = false
            odt = 1979-05-27T07:32:00.999-07:00
            spaced = 1979-05-27 07:32:00Z
            ldt = 1979-05-27T07:32:00
            ld = 1979-05-27
            lt = 07:32:00.5
            """#)
        #expect(kind(table, "basic") == .string("tab\there \"q\" é 😀"))
        #expect(kind(table, "literal") == .string(#"C:\path\*"#))
        #expect(kind(table, "hex") == .integer(0xDEAD_BEEF))
        #expect(kind(table, "oct") == .integer(0o755))
        #expect(kind(table, "bin") == .integer(13))
        #expect(kind(table, "dec") == .integer(-1000))
        #expect(kind(table, "plus") == .integer(42))
        #expect(kind(table, "zero") == .integer(0))
        #expect(kind(table, "float") == .float(3.14))
        #expect(kind(table, "exp") == .float(6.02e23))
        #expect(kind(table, "negexp") == .float(-0.01))
        #expect(kind(table, "underscored") == .float(9224.617445))
        #expect(kind(table, "inf") == .float(-.infinity))
        guard case .float(let nan)? = kind(table, "nan") else { Issue.record("nan is not a float"); return }
        #expect(nan.isNaN)
        #expect(kind(table, "yes") == .boolean(true) && kind(table, "no") == .boolean(false))
        #expect(kind(table, "odt") == .datetime("1979-05-27T07:32:00.999-07:00"))
        #expect(kind(table, "spaced") == .datetime("1979-05-27 07:32:00Z"))
        #expect(kind(table, "ldt") == .datetime("1979-05-27T07:32:00"))
        #expect(kind(table, "ld") == .datetime("1979-05-27"))
        #expect(kind(table, "lt") == .datetime("07:32:00.5"))
    }

    @Test("multi-line strings: first newline trimmed, line-ending backslash, quotes at the end")
    func multilineStrings() throws {
        let table = try parse(#"""
            a = """
            one
            two"""
            b = """\
                joined \
                words"""
            c = '''
            raw \n text'''
            d = """she said "hi"."""""
            e = '''it''s'''''
            after = 1
            """#)
        #expect(kind(table, "a") == .string("one\ntwo"))
        #expect(kind(table, "b") == .string("joined words"))
        #expect(kind(table, "c") == .string(#"raw \n text"#))
        #expect(kind(table, "d") == .string("she said \"hi\".\"\""))
        #expect(kind(table, "e") == .string("it''s''"))
        #expect(table["after"]?.line == 11)
    }

    @Test("tables: headers, dotted keys, quoted keys, inline tables, arrays of tables; lines are kept")
    func tables() throws {
        let table = try parse("""
            # comment
            title = "x" # trailing comment

            [destinations.photos]
            protocol = "file"
            site."web host" = 'h'
            [destinations."with space"]
            point = { x = 1, y.z = 2 }
            list = [
              1,  # one
              2,
            ]
            [[hooks]]
            name = "a"
            [[hooks]]
            name = "b"
            [hooks.sub]
            deep = true
            """)
        #expect(table.keys == ["title", "destinations", "hooks"])
        #expect(table.line == 1)
        #expect(table["title"]?.line == 2)
        #expect(kind(table, "destinations.photos.protocol") == .string("file"))
        guard case .table(let photos)? = kind(table, "destinations.photos"),
              case .table(let site)? = photos["site"]?.kind
        else { Issue.record("missing tables"); return }
        #expect(photos.line == 4)
        #expect(site["web host"]?.kind == .string("h"))
        #expect(site["web host"]?.line == 6)
        guard case .table(let spaced)? = kind(table, "destinations.with space") else { Issue.record("quoted key"); return }
        #expect(spaced.line == 7)
        guard case .table(let point)? = spaced["point"]?.kind, case .table(let y)? = point["y"]?.kind else {
            Issue.record("inline table"); return
        }
        #expect(point["x"]?.kind == .integer(1) && y["z"]?.kind == .integer(2))
        #expect(spaced["list"]?.kind == .array([TOMLValue(kind: .integer(1), line: 10), TOMLValue(kind: .integer(2), line: 11)]))
        #expect(spaced["list"]?.line == 9)
        guard case .array(let hooks)? = table["hooks"]?.kind, hooks.count == 2,
              case .table(let first) = hooks[0].kind, case .table(let second) = hooks[1].kind
        else { Issue.record("array of tables"); return }
        #expect(first["name"]?.kind == .string("a") && first.line == 13)
        #expect(second["name"]?.kind == .string("b") && second.line == 15)
        guard case .table(let sub)? = second["sub"]?.kind else { Issue.record("sub-table of the last element"); return }
        #expect(sub["deep"]?.kind == .boolean(true))
    }

    @Test("a table first made implicit by a deeper header may be defined once")
    func implicitThenExplicit() throws {
        let table = try parse("[a.b]\nx = 1\n[a]\ny = 2\n")
        guard case .table(let a)? = table["a"]?.kind else { Issue.record("no table a"); return }
        #expect(a.line == 3)
        #expect(a["y"]?.kind == .integer(2))
        #expect(kind(table, "a.b.x") == .integer(1))
    }

    @Test("CRLF line endings are accepted and counted once")
    func crlf() throws {
        let table = try parse("a = 1\r\nb = \"\"\"\r\nx\r\ny\"\"\"\r\nc = 3\r\n")
        #expect(kind(table, "b") == .string("x\ny"))
        #expect(table["c"]?.line == 5)
    }

    @Test("errors name the line and column", arguments: [
        ("a = 1\na = 2\n", 2, "duplicate key"),
        ("[t]\nx = 1\n[t]\n", 3, "already defined"),
        ("a = 1\n[a]\n", 2, "not a table"),
        ("[a]\nb = 1\n[a.b]\n", 3, "not a table"),
        ("[[a]]\n[a]\n", 2, "array of tables"),
        ("[a]\n[[a]]\n", 2, "conflicts"),
        ("a = [1]\n[[a]]\n", 2, "not an array of tables"),
        ("a.b = 1\n[a.b]\n", 2, "not a table"),
        ("[a.b]\n[a]\nb.c = 1\n", 3, "dotted key"),
        ("p = { x = 1 }\np.y = 2\n", 2, "not a table"),
        ("a = \"open\n", 1, "newline in a single-line string"),
        ("a = \"\\q\"\n", 1, "invalid escape"),
        ("a = 01\n", 1, "invalid value"),
        ("a = 1__0\n", 1, "invalid value"),
        ("a = 0x\n", 1, "invalid value"),
        ("a = 1.\n", 1, "invalid value"),
        ("a = .5\n", 1, "invalid value"),
        ("a = tru\n", 1, "invalid value"),
        ("a = 1 2\n", 1, "end of the line"),
        ("a =\n", 1, "expected a value"),
        ("= 1\n", 1, "expected a key"),
        ("a = { x = 1, }\n", 1, "expected a key"),
        ("a = { x = 1\n", 1, "',' or '}'"),
        ("a = [1, 2\n", 2, "',' or ']'"),
        ("[a\n", 1, "']'"),
        ("ok = 1\n\n\nbad = \"\"\"\nnever closed\n", 6, "unterminated multi-line string"),
        ("a = 1\rb = 2\n", 1, "carriage return"),
        ("x = 2024-13\n", 1, "invalid value"),
    ])
    func errors(text: String, line: Int, message: String) throws {
        let error = try #require(failure(text))
        #expect(error.line == line, "\(error)")
        #expect(error.message.contains(message), "\(error)")
        #expect(error.column >= 1)
        #expect(error.description.hasPrefix("line \(line), column "))
    }

    @Test("integers beyond 64 bits are refused")
    func overflow() {
        #expect(failure("big = 9223372036854775808\n") != nil)
        #expect(kind((try? parse("max = 9223372036854775807\n")) ?? TOMLTable(line: 1), "max") == .integer(.max))
    }
}

/// A small JSON parser that records the line of every object member, so a
/// bad scenario file is reported as "field X on line N".
struct JSONParser {
    struct Failure: Error {
        var message: String
        var line: Int
    }

    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var depth = 0

    init(text: String) { bytes = Array(text.utf8) }

    /// Parses one JSON document.
    static func parse(_ text: String) throws(Failure) -> JSONValue {
        var parser = JSONParser(text: text)
        parser.skipSpace()
        let value = try parser.parseValue()
        parser.skipSpace()
        guard parser.index == parser.bytes.count else { throw parser.fail("unexpected text after the end of the document") }
        return value
    }

    private func fail(_ message: String) -> Failure { Failure(message: message, line: line) }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x0A: line += 1; index += 1
            case 0x20, 0x09, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws(Failure) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of file") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character '\(Character(UnicodeScalar(bytes[index])))'")
        }
    }

    private mutating func literal(_ word: String) throws(Failure) {
        let w = Array(word.utf8)
        guard index + w.count <= bytes.count, Array(bytes[index..<index + w.count]) == w else { throw fail("invalid literal") }
        index += w.count
    }

    private mutating func parseNumber() throws(Failure) -> JSONValue {
        let start = index
        while index < bytes.count, "+-0123456789.eE".utf8.contains(bytes[index]) { index += 1 }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard Double(text) != nil else { throw fail("invalid number '\(text)'") }
        return .number(text)
    }

    private mutating func parseString() throws(Failure) -> String {
        index += 1
        var out: [UInt8] = []
        while index < bytes.count {
            let b = bytes[index]
            index += 1
            switch b {
            case UInt8(ascii: "\""): return String(decoding: out, as: UTF8.self)
            case 0x0A: throw fail("line break inside a string")
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { break }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "u"):
                    guard index + 4 <= bytes.count, let code = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                        throw fail("invalid \\u escape")
                    }
                    index += 4
                    out += Array(String(UnicodeScalar(code).map(Character.init) ?? "\u{FFFD}").utf8)
                default: out.append(e)
                }
            default: out.append(b)
            }
        }
        throw fail("unterminated string")
    }

    private mutating func parseArray() throws(Failure) -> JSONValue {
        index += 1
        depth += 1
        guard depth < 64 else { throw fail("nesting too deep") }
        defer { depth -= 1 }
        var items: [JSONValue] = []
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try parseValue())
            skipSpace()
            guard index < bytes.count else { throw fail("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
            throw fail("expected ',' or ']' in an array")
        }
    }

    private mutating func parseObject() throws(Failure) -> JSONValue {
        index += 1
        depth += 1
        guard depth < 64 else { throw fail("nesting too deep") }
        defer { depth -= 1 }
        var members: [JSONValue.Member] = []
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a quoted member name") }
            let nameLine = line
            let name = try parseString()
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':' after \"\(name)\"") }
            index += 1
            skipSpace()
            members.append(.init(name: name, value: try parseValue(), line: nameLine))
            skipSpace()
            guard index < bytes.count else { throw fail("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            throw fail("expected ',' or '}' in an object")
        }
    }
}

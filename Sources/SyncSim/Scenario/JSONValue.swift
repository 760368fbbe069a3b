/// A JSON value that remembers the line each object member was written on,
/// so scenario errors can name the line. Numbers keep their source text.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number's literal text, e.g. `42` or `1.5e3`.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in file order, each with the 1-based line of its name.
    case object([Member])

    /// One member of an object.
    public struct Member: Sendable, Equatable {
        public var name: String
        public var value: JSONValue
        public var line: Int

        public init(name: String, value: JSONValue, line: Int = 0) {
            self.name = name
            self.value = value
            self.line = line
        }
    }

    /// The member named `name`, if this is an object that has it.
    public subscript(name: String) -> JSONValue? { member(name)?.value }

    /// The member named `name`, with its line.
    public func member(_ name: String) -> Member? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.name == name }
    }

    /// Builds an object from name/value pairs (lines unknown).
    public static func object(_ pairs: [(String, JSONValue)]) -> JSONValue {
        .object(pairs.map { Member(name: $0.0, value: $0.1) })
    }

    public static func int(_ value: Int) -> JSONValue { .number(String(value)) }
    public static func double(_ value: Double) -> JSONValue {
        value == value.rounded() && abs(value) < 1e15 ? .number(String(Int(value))) : .number(String(value))
    }

    /// The type's name, for error messages.
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Compact JSON with object members sorted by name: the canonical bytes of a value.
    public var canonicalText: String {
        var out = ""
        write(to: &out, pretty: false, sorted: true, indent: 0)
        return out
    }

    /// Indented JSON, members in their given order (for scenario files).
    public var prettyText: String {
        var out = ""
        write(to: &out, pretty: true, sorted: false, indent: 0)
        return out + "\n"
    }

    private func write(to out: inout String, pretty: Bool, sorted: Bool, indent: Int) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let text): out += text
        case .string(let s): JSONValue.quote(s, into: &out)
        case .array(let items):
            // Arrays of scalars stay on one line.
            let flat = !pretty || items.allSatisfy { if case .object = $0 { return false } else if case .array = $0 { return false } else { return true } }
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += flat && pretty ? ", " : "," }
                if !flat { out += "\n" + String(repeating: "  ", count: indent + 1) }
                item.write(to: &out, pretty: pretty, sorted: sorted, indent: indent + 1)
            }
            if !flat && !items.isEmpty { out += "\n" + String(repeating: "  ", count: indent) }
            out += "]"
        case .object(let members):
            let list = sorted ? members.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) } : members
            // Small objects of scalars stay on one line (timeline steps read well that way).
            let flat = !pretty || (list.count <= 8 && list.allSatisfy {
                switch $0.value { case .object(let m): m.isEmpty; case .array(let a): a.count <= 8 && a.allSatisfy { if case .object = $0 { false } else { true } }; default: true }
            } && indent > 0)
            out += "{"
            for (i, member) in list.enumerated() {
                if i > 0 { out += flat && pretty ? ", " : "," }
                if !flat { out += "\n" + String(repeating: "  ", count: indent + 1) }
                JSONValue.quote(member.name, into: &out)
                out += pretty ? ": " : ":"
                member.value.write(to: &out, pretty: pretty, sorted: sorted, indent: indent + 1)
            }
            if !flat && !list.isEmpty { out += "\n" + String(repeating: "  ", count: indent) }
            out += "}"
        }
    }

    private static func quote(_ s: String, into out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}

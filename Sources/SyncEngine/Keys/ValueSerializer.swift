import Foundation

/// Turns a key's typed value into bytes and back. JSON by default.
public struct ValueSerializer<Value: Sendable>: Sendable {
    /// A stable identifier stored with every value and compared at handshake.
    public let identifier: String
    private let encodeBody: @Sendable (Value) throws -> [UInt8]
    private let decodeBody: @Sendable ([UInt8]) throws -> Value

    /// A custom serializer. `identifier` must differ from the built-in ones.
    public init(identifier: String, encode: @escaping @Sendable (Value) throws -> [UInt8], decode: @escaping @Sendable ([UInt8]) throws -> Value) {
        self.identifier = identifier
        self.encodeBody = encode
        self.decodeBody = decode
    }

    public func encode(_ value: Value) throws -> [UInt8] {
        do { return try encodeBody(value) } catch let error as SyncError { throw error } catch {
            throw SyncError(.encodingFailed, "cannot encode a \(Value.self) with the \(identifier) serializer: \(type(of: error))")
        }
    }

    public func decode(_ bytes: [UInt8]) throws -> Value {
        do { return try decodeBody(bytes) } catch let error as SyncError { throw error } catch {
            throw SyncError(.typeMismatch, "the stored bytes do not decode as \(Value.self) with the \(identifier) serializer; was the key's type or serializer changed?")
        }
    }
}

extension ValueSerializer where Value: Codable {
    /// JSON (the default).
    public static var json: ValueSerializer<Value> {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let decoder = JSONDecoder()
        // Strings, integers and booleans are written directly, byte for byte as JSONEncoder writes them.
        let scalar = JSONScalar.encoder(for: Value.self)
        // And read back directly when in the form written so (anything else: JSONDecoder decides).
        let scalarDecoder = JSONScalar.decoder(for: Value.self)
        return ValueSerializer(identifier: "json", encode: { value in
            if let scalar { return scalar(value) }
            return [UInt8](try encoder.encode(value))
        }, decode: { bytes in
            if let scalarDecoder, let value = scalarDecoder(bytes) { return value }
            return try decoder.decode(Value.self, from: Data(bytes))
        })
    }

    /// Binary property list. Bytes from elsewhere are decoded only when
    /// their objects form a tree at most 512 levels deep, as an encoder
    /// writes them (`BinaryPropertyListShape`).
    public static var binaryPropertyList: ValueSerializer<Value> {
        ValueSerializer(identifier: "plist", encode: { value in
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            return [UInt8](try encoder.encode([value]))
        }, decode: { bytes in
            try BinaryPropertyListShape.check(bytes)
            guard let first = try PropertyListDecoder().decode([Value].self, from: Data(bytes)).first else {
                throw SyncError(.typeMismatch, "empty property list")
            }
            return first
        })
    }
}

extension ValueSerializer where Value == Data {
    /// The bytes themselves.
    public static var data: ValueSerializer<Data> {
        ValueSerializer(identifier: "data", encode: { [UInt8]($0) }, decode: { Data($0) })
    }
}

extension ValueSerializer where Value == [UInt8] {
    /// The bytes themselves.
    public static var bytes: ValueSerializer<[UInt8]> {
        ValueSerializer(identifier: "data", encode: { $0 }, decode: { $0 })
    }
}

extension ValueSerializer where Value == String {
    /// UTF-8 text.
    public static var string: ValueSerializer<String> {
        ValueSerializer(identifier: "string", encode: { Array($0.utf8) }, decode: { bytes in
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw SyncError(.typeMismatch, "the stored bytes are not UTF-8 text")
            }
            return text
        })
    }
}

/// JSON for the top-level scalars without `JSONEncoder` (the largest cost of
/// a typed write of a small value): the same bytes it writes.
enum JSONScalar {
    /// A direct encoder when `Value` is `String`, `Int` or `Bool`; nil otherwise.
    static func encoder<Value>(for type: Value.Type) -> (@Sendable (Value) -> [UInt8])? {
        if type == String.self { return { string($0 as! String) } }
        if type == Int.self { return { Array(String($0 as! Int).utf8) } }
        if type == Bool.self { return { ($0 as! Bool) ? Array("true".utf8) : Array("false".utf8) } }
        return nil
    }

    /// A direct decoder when `Value` is `String`, `Int` or `Bool`; nil
    /// otherwise. It gives nil for bytes in any form but the plain one a
    /// JSON encoder writes (white space, `\u` escapes, `-0`, a number past
    /// `Int`, anything malformed): `JSONDecoder` reads those, as before.
    static func decoder<Value>(for type: Value.Type) -> (@Sendable ([UInt8]) -> Value?)? {
        if type == String.self { return { bytes in stringValue(bytes).map { $0 as! Value } } }
        if type == Int.self { return { bytes in intValue(bytes).map { $0 as! Value } } }
        if type == Bool.self { return { bytes in boolValue(bytes).map { $0 as! Value } } }
        return nil
    }

    /// The text of a JSON string literal whose escapes are all of one
    /// character (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`) and whose
    /// bytes are UTF-8; nil for anything else.
    static func stringValue(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { literal -> String? in
            let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
            guard literal.count >= 2, literal[0] == quote, literal[literal.count - 1] == quote else { return nil }
            let body = UnsafeBufferPointer(rebasing: literal[1..<(literal.count - 1)])
            guard let first = body.firstIndex(where: { $0 < 0x20 || $0 == quote || $0 == backslash }) else {
                return String(validating: body, as: UTF8.self)
            }
            var text: [UInt8] = []
            text.reserveCapacity(body.count)
            text.append(contentsOf: UnsafeBufferPointer(rebasing: body[..<first]))
            var index = first
            while index < body.count {
                let byte = body[index]
                // A bare control character or quote: not a string literal (the closing quote ended it).
                if byte < 0x20 || byte == quote { return nil }
                guard byte == backslash else {
                    text.append(byte)
                    index += 1
                    continue
                }
                // An escape that would take the closing quote leaves the literal unclosed.
                guard index + 1 < body.count else { return nil }
                switch body[index + 1] {
                case quote: text.append(quote)
                case backslash: text.append(backslash)
                case UInt8(ascii: "/"): text.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                default: return nil
                }
                index += 2
            }
            return String(validating: text, as: UTF8.self)
        }
    }

    /// A whole number as a JSON encoder writes one (digits, `-` before all
    /// but zero, no leading zero) that fits `Int`; nil for anything else.
    static func intValue(_ bytes: [UInt8]) -> Int? {
        let negative = bytes.first == UInt8(ascii: "-")
        let digits = bytes.dropFirst(negative ? 1 : 0)
        let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")
        guard let first = digits.first, (zero...nine).contains(first), first != zero || (digits.count == 1 && !negative) else { return nil }
        var value = 0
        for digit in digits {
            guard (zero...nine).contains(digit) else { return nil }
            let (shifted, shiftOverflow) = value.multipliedReportingOverflow(by: 10)
            let units = Int(digit - zero)
            let (next, overflow) = negative ? shifted.subtractingReportingOverflow(units) : shifted.addingReportingOverflow(units)
            guard !shiftOverflow, !overflow else { return nil }
            value = next
        }
        return value
    }

    /// `true` or `false`, exactly; nil for anything else.
    static func boolValue(_ bytes: [UInt8]) -> Bool? {
        if bytes.elementsEqual("true".utf8) { return true }
        if bytes.elementsEqual("false".utf8) { return false }
        return nil
    }

    /// A JSON string literal, escaped as `JSONEncoder` escapes it (`/` as `\/`).
    static func string(_ text: String) -> [UInt8] {
        var text = text
        return text.withUTF8 { utf8 in
            // Most strings need no escape: one copy between the quotes.
            guard utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "/") }) else {
                return [UInt8](unsafeUninitializedCapacity: utf8.count + 2) { buffer, count in
                    buffer[0] = UInt8(ascii: "\"")
                    if let source = utf8.baseAddress { (buffer.baseAddress! + 1).initialize(from: source, count: utf8.count) }
                    buffer[utf8.count + 1] = UInt8(ascii: "\"")
                    count = utf8.count + 2
                }
            }
            return escaped(utf8)
        }
    }

    /// `string(_:)` for text with bytes to escape.
    private static func escaped(_ utf8: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 2)
        out.append(UInt8(ascii: "\""))
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "/"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "/"))
            case 0x08: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "f"))
            case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += Array("\\u00".utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }
}

import Foundation

/// Finds the line a coding path points at in JSON text, for error messages
/// only (nothing is located until a file is found bad). A forward scan that
/// enters only the objects and arrays on the path; it stops where the path
/// leaves the text (a member that is missing) and names the line of the
/// deepest place it reached: a member's name, or the start of an element.
/// Scenario files and key registry files (`KeyRegistry.load(jsonFile:)`) use it.
package struct JSONLocator {
    private let bytes: [UInt8]
    private var index = 0
    private var line = 1

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The 1-based line of `path` in `text` (of its deepest part that is present).
    package static func line(of path: [any CodingKey], in text: some Sequence<UInt8>) -> Int {
        var locator = JSONLocator(Array(text))
        return locator.locate(path)
    }

    private mutating func locate(_ path: [any CodingKey]) -> Int {
        skipSpace()
        var found = line
        for component in path {
            guard index < bytes.count else { break }
            if bytes[index] == UInt8(ascii: "["), let wanted = component.intValue, enterElement(wanted) {
                found = line
            } else if bytes[index] == UInt8(ascii: "{"), let nameLine = enterMember(component.stringValue) {
                found = nameLine
            } else {
                break
            }
        }
        return found
    }

    /// Moves to the start of element `wanted` of the array here; false if it has fewer.
    private mutating func enterElement(_ wanted: Int) -> Bool {
        index += 1
        var position = 0
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] != UInt8(ascii: "]") else { return false }
            if position == wanted { return true }
            skipValue()
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { return false }
            index += 1
            position += 1
        }
    }

    /// Moves to the value of member `name` of the object here; the line of its name, or nil.
    private mutating func enterMember(_ name: String) -> Int? {
        index += 1
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            let nameLine = line
            let start = index
            skipString()
            let found = JSONLocator.decodeName(bytes[start..<index]) == name
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipSpace()
            if found { return nameLine }
            skipValue()
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
        }
    }

    /// A member name as the decoder saw it (escapes resolved).
    private static func decodeName(_ quoted: ArraySlice<UInt8>) -> String? {
        guard quoted.count >= 2 else { return nil }
        if !quoted.contains(UInt8(ascii: "\\")) { return String(decoding: quoted.dropFirst().dropLast(), as: UTF8.self) }
        return try? JSONDecoder().decode(String.self, from: Data(quoted))
    }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\n"): line += 1; index += 1
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"): index += 1
            default: return
            }
        }
    }

    private mutating func skipString() {
        index += 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""): index += 1; return
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "\n"): line += 1; index += 1
            default: index += 1
            }
        }
    }

    /// Skips one value: a string, a literal or number, or a whole object or array.
    private mutating func skipValue() {
        guard index < bytes.count else { return }
        switch bytes[index] {
        case UInt8(ascii: "\""):
            skipString()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""): skipString(); continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
                case UInt8(ascii: "\n"): line += 1
                default: break
                }
                index += 1
                if depth == 0 { return }
            }
        default:
            while index < bytes.count, !",}] \t\r\n".utf8.contains(bytes[index]) { index += 1 }
        }
    }

    /// A coding path as a field name: `keys[0].family`.
    package static func fieldName(of path: [any CodingKey]) -> String {
        var name = ""
        for key in path {
            if let index = key.intValue {
                name += "[\(index)]"
            } else {
                name += name.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return name
    }
}

/// Where a text first fails to be JSON (RFC 8259): Foundation's parser
/// refuses leading zeros, unpaired surrogates and control characters in
/// strings; a trailing comma, which it lets through, is refused here.
package struct JSONSyntaxError: Equatable {
    package var line: Int
    package var message: String

    /// Nil when `data` is valid JSON.
    package init?(validating data: Data) {
        // Foundation reads UTF-16 and UTF-32 too, and the checks below, which take bytes for UTF-8, then misread it.
        if let encoding = JSONSyntaxError.wideEncoding(of: data) {
            line = 1
            message = "the file is not UTF-8 but \(encoding); save it as UTF-8"
            return
        }
        do {
            _ = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
            if let comma = JSONSyntaxError.trailingComma(in: data) {
                line = comma
                message = "a comma before the end of an object or array"
            } else if let repeated = JSONSyntaxError.repeatedMember(in: data) {
                // Foundation keeps one of the two silently: `"security": "encrypted"` then `"none"`.
                line = repeated.line
                message = "the field '\(repeated.name)' is given twice in one object; give it once"
            } else {
                return nil
            }
        } catch {
            var text = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? "\(error)"
            if let lone = JSONSyntaxError.loneSurrogate(explaining: text, in: data) {
                (line, message) = (lone.line, lone.message)
                return
            }
            line = 0
            // "Invalid value around character 19." — a 0-based byte offset.
            if let range = text.range(of: " around character ") {
                let offset = Int(text[range.upperBound...].prefix { $0.isNumber }) ?? 0
                line = 1 + data.prefix(offset).reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
                text = String(text[..<range.lowerBound])
            } else if text.hasSuffix(".") {
                text.removeLast()
            }
            if line == 0 { line = JSONSyntaxError.lineWithoutOffset(for: text, in: data) }
            if data.allSatisfy({ [0x20, 0x09, 0x0A, 0x0D].contains($0) }) { text = "the file is empty" }
            message = text.prefix(1).lowercased() + text.dropFirst()
        }
    }

    /// A clear reason for Foundation's refusal of `data` when it is a lone
    /// surrogate escape, which Foundation reports as an early end ("Unexpected
    /// end of file during string parse", even "during JSON parse") or as a
    /// hex escape it cannot convert: the escape, and the line of its string.
    /// Nil for any other refusal (a number out of range before it stays that).
    package static func loneSurrogate(explaining foundationText: String, in data: Data) -> (message: String, line: Int)? {
        let text = foundationText.lowercased()
        guard text.contains("surrogate") || text.contains("end of file") || text.contains("hex escape"),
              let lone = loneSurrogate(in: data) else { return nil }
        return ("a lone UTF-16 surrogate \(lone.escape) is not a character; write one past U+FFFF as a pair (\\ud83d\\ude00) or as itself", lone.line)
    }

    /// The first `\u` escape of a UTF-16 surrogate that is not half of a
    /// pair (a high one not followed at once by a low one, or a low one with
    /// no high one before it), as written, and the line its string starts on.
    static func loneSurrogate(in data: Data) -> (escape: String, line: Int)? {
        let bytes = [UInt8](data)
        func unit(at i: Int) -> Int? {
            guard i + 6 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u"),
                  bytes[(i + 2)..<(i + 6)].allSatisfy({ $0 < 0x80 && Character(Unicode.Scalar($0)).isHexDigit }) else { return nil }
            return Int(String(decoding: bytes[(i + 2)..<(i + 6)], as: UTF8.self), radix: 16)
        }
        var line = 1, start = 1, index = 0, inString = false
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\n") { line += 1 }
            if byte == UInt8(ascii: "\"") {
                inString.toggle()
                start = line
            } else if inString, byte == UInt8(ascii: "\\") {
                guard let high = unit(at: index) else {
                    index += 2
                    continue
                }
                if (0xD800...0xDBFF).contains(high), let low = unit(at: index + 6), (0xDC00...0xDFFF).contains(low) {
                    index += 12
                    continue
                }
                if (0xD800...0xDFFF).contains(high) { return (String(decoding: bytes[index..<(index + 6)], as: UTF8.self), start) }
                index += 6
                continue
            }
            index += 1
        }
        return nil
    }

    /// What UTF-16 or UTF-32 `data` looks like, from its byte order mark or
    /// the NUL bytes its first characters have (JSON text starts with an ASCII
    /// one, a NUL in none of UTF-8's); nil for any other data.
    static func wideEncoding(of data: Data) -> String? {
        let head = [UInt8](data.prefix(4))
        if head == [0x00, 0x00, 0xFE, 0xFF] || head == [0xFF, 0xFE, 0x00, 0x00] { return "UTF-32 (it starts with a byte order mark)" }
        if head.starts(with: [0xFE, 0xFF]) || head.starts(with: [0xFF, 0xFE]) { return "UTF-16 (it starts with a byte order mark)" }
        if head.contains(0) { return "UTF-16 or UTF-32 (its first bytes include NULs)" }
        return nil
    }

    /// The line of an error Foundation reports without an offset: the number
    /// it names, the first lone surrogate escape, or the file's last line for
    /// an early end; 0 when none is found.
    static func lineWithoutOffset(for message: String, in data: Data) -> Int {
        if let start = message.range(of: "number ", options: .caseInsensitive), let end = message.range(of: " is not representable", range: start.upperBound..<message.endIndex) {
            return scan(data) { token, _ in token == Array(message[start.upperBound..<end.lowerBound].utf8) } ?? 0
        }
        if message.contains("surrogate"), let line = scan(data, { _, escapes in escapes.contains { (0xD800...0xDBFF).contains($0.high) && !(0xDC00...0xDFFF).contains($0.next ?? 0) } }) {
            return line
        }
        if message.contains("end of file") {
            var line = 1, last = 1
            for byte in data {
                if byte == UInt8(ascii: "\n") { line += 1 } else if ![0x20, 0x09, 0x0D].contains(byte) { last = line }
            }
            return last
        }
        return 0
    }

    /// The line of the first token outside strings (a number, `true`…) for which
    /// `match(token, [])` holds, or of the first string whose `\u` escapes
    /// (each with the one after it) make `match([], escapes)` hold.
    static func scan(_ data: Data, _ match: ([UInt8], [(high: Int, next: Int?)]) -> Bool) -> Int? {
        let bytes = [UInt8](data)
        var line = 1, index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\n") { line += 1 }
            if byte == UInt8(ascii: "\"") {
                let start = line
                var units: [Int] = []
                index += 1
                while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                    if bytes[index] == UInt8(ascii: "\n") { line += 1 }
                    if bytes[index] == UInt8(ascii: "\\"), index + 1 < bytes.count {
                        if bytes[index + 1] == UInt8(ascii: "u"), index + 6 <= bytes.count,
                           let unit = Int(String(decoding: bytes[(index + 2)..<(index + 6)], as: UTF8.self), radix: 16) {
                            units.append(unit)
                        }
                        index += 1
                    }
                    index += 1
                }
                let escapes = units.indices.map { (high: units[$0], next: $0 + 1 < units.count ? units[$0 + 1] : nil) }
                if !escapes.isEmpty, match([], escapes) { return start }
            } else if !byte.isJSONSpaceOrPunctuation {
                var end = index
                while end < bytes.count, !bytes[end].isJSONSpaceOrPunctuation, bytes[end] != UInt8(ascii: "\"") { end += 1 }
                if match(Array(bytes[index..<end]), []) { return line }
                index = end
                continue
            }
            index += 1
        }
        return nil
    }

    /// The first member name given twice in one object of valid JSON `data`
    /// (compared as decoded text, scalar by scalar), with the line of its second use.
    static func repeatedMember(in data: Data) -> (name: String, line: Int)? {
        let bytes = [UInt8](data)
        // One entry per open container: the member names of an object, as UTF-8 (nil for an array).
        var open: [Set<[UInt8]>?] = []
        var expectsName = false
        var line = 1, index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\n"): line += 1
            case UInt8(ascii: "{"): open.append([]); expectsName = true
            case UInt8(ascii: "["): open.append(nil); expectsName = false
            case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = open.popLast(); expectsName = false
            case UInt8(ascii: ","): expectsName = open.last.map { $0 != nil } ?? false
            case UInt8(ascii: ":"): expectsName = false
            case UInt8(ascii: "\""):
                let start = index, startLine = line
                index += 1
                while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                    if bytes[index] == UInt8(ascii: "\\") { index += 1 }
                    index += 1
                }
                if expectsName, var names = open.last ?? nil {
                    let literal = Data(bytes[start...min(index, bytes.count - 1)])
                    let name = (try? JSONSerialization.jsonObject(with: literal, options: [.fragmentsAllowed])) as? String ?? ""
                    guard names.insert(Array(name.utf8)).inserted else { return (name, startLine) }
                    open[open.count - 1] = names
                }
            default: break
            }
            index += 1
        }
        return nil
    }

    /// The line of the first comma followed only by white space before a `}` or `]`.
    static func trailingComma(in data: Data) -> Int? {
        var line = 1
        var inString = false, escaped = false
        var comma: Int?
        for byte in data {
            if byte == UInt8(ascii: "\n") { line += 1 }
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), UInt8(ascii: "\n"): continue
            case UInt8(ascii: ","): comma = line; continue
            case UInt8(ascii: "}"), UInt8(ascii: "]"): if let comma { return comma }
            case UInt8(ascii: "\""): inString = true
            default: break
            }
            comma = nil
        }
        return nil
    }
}

private extension UInt8 {
    /// White space or a structural character of JSON: what ends a bare token.
    var isJSONSpaceOrPunctuation: Bool { [0x20, 0x09, 0x0A, 0x0D, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D].contains(self) }
}

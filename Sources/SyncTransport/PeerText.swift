/// Text a peer wrote (an error frame's code or message), made safe to log or
/// put in an error: control and format characters (newlines, tabs, escape
/// sequences, bidirectional overrides, line separators) become visible escapes
/// (`\n`, `\r`, `\t`, `\u{1b}`), backslashes are doubled, and the length is
/// bounded. A peer can then never forge a log line or flood a log through
/// its text. Text from a peer that did not authenticate is never logged at all.
package enum PeerText {
    /// The longest escaped text kept, in Unicode scalars; longer text is cut and ends with `…`.
    package static let defaultMaxLength = 256

    /// `text` with control and format characters escaped, at most `maxLength` scalars (then `…`).
    package static func escaped(_ text: String, maxLength: Int = defaultMaxLength) -> String {
        var result = ""
        var count = 0
        for scalar in text.unicodeScalars {
            let piece: String
            switch scalar {
            case "\n": piece = "\\n"
            case "\r": piece = "\\r"
            case "\t": piece = "\\t"
            case "\\": piece = "\\\\"
            default:
                piece = isInvisible(scalar) ? "\\u{\(String(scalar.value, radix: 16))}" : String(scalar)
            }
            let length = piece.unicodeScalars.count
            if count + length > maxLength {
                result += "…"
                break
            }
            result += piece
            count += length
        }
        return result
    }

    /// Whether a terminal or a log may take `scalar` as other than text:
    /// controls (C0, DEL, C1), format characters (bidirectional overrides,
    /// tags), line and paragraph separators, private-use and unassigned scalars.
    package static func isInvisible(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned: true
        default: false
        }
    }
}

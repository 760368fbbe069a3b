import Foundation
import SyncTransport

/// What `syncsim` prints of text a store or a peer supplied (key names, a
/// family member's name being the peer's to choose), made safe for a
/// terminal or a log reading its output.
enum VisibleText {
    /// JSON text with every invisible scalar but a line break (which only
    /// pretty-printing puts between tokens; the encoders escape one inside a
    /// string) written as a `\u` escape: the same JSON value, in visible text.
    /// The encoders escape C0 controls themselves, not DEL, C1 controls or
    /// bidirectional overrides. Invisible scalars only occur inside strings,
    /// where such an escape is valid.
    static func escapingInvisibles(inJSON json: String) -> String {
        guard json.unicodeScalars.contains(where: { $0 != "\n" && PeerText.isInvisible($0) }) else { return json }
        var result = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            guard scalar != "\n", PeerText.isInvisible(scalar) else {
                result.append(scalar)
                continue
            }
            for unit in String(scalar).utf16 {
                let hex = String(unit, radix: 16)
                result.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            }
        }
        return String(result)
    }

    /// `escapingInvisibles(inJSON:)` of UTF-8 JSON bytes.
    static func escapingInvisibles(inJSON data: Data) -> Data {
        guard data.contains(where: { $0 >= 0x7F }) else { return data }
        return Data(escapingInvisibles(inJSON: String(decoding: data, as: UTF8.self)).utf8)
    }

    /// A key name for a table of `syncsim`'s human output: escaped and bounded as peer text (`PeerText`).
    static func name(_ key: String) -> String { PeerText.escaped(key) }
}

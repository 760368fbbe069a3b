import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// Strings, integers and booleans in the plain form a JSON encoder writes
/// are read back without `JSONDecoder`, to the same values; every other form
/// still goes to `JSONDecoder`, which decides as before.
@Suite struct JSONScalarDecodeTests {
    @Test func plainScalarsAreReadDirectly() {
        #expect(JSONScalar.stringValue(Array(#""plain""#.utf8)) == "plain")
        #expect(JSONScalar.stringValue(Array(#""a\"b\\c\/d\b\f\n\r\t é 🎉""#.utf8)) == "a\"b\\c/d\u{8}\u{C}\n\r\t é 🎉")
        #expect(JSONScalar.stringValue(Array(#""""#.utf8)) == "")
        #expect(JSONScalar.intValue(Array("0".utf8)) == 0)
        #expect(JSONScalar.intValue(Array("-42".utf8)) == -42)
        #expect(JSONScalar.intValue(Array(String(Int.max).utf8)) == Int.max)
        #expect(JSONScalar.intValue(Array(String(Int.min).utf8)) == Int.min)
        #expect(JSONScalar.boolValue(Array("true".utf8)) == true)
        #expect(JSONScalar.boolValue(Array("false".utf8)) == false)
    }

    @Test func otherFormsAreLeftToJSONDecoder() throws {
        for text in [#" "a""#, #""a" "#, #""\u0041""#, #""abc"#, #""a\""#, #""a\x""#, "\"a\u{1}b\"", #""a"b""#, "", "\"", "a"] {
            #expect(JSONScalar.stringValue(Array(text.utf8)) == nil, "\(text)")
        }
        #expect(JSONScalar.stringValue([0x22, 0xFF, 0x22]) == nil)
        #expect(JSONScalar.stringValue([0x22, 0xC3, 0x22]) == nil)
        for text in ["-0", "01", "+1", "1e3", "1.0", " 1", "1 ", "-", "", "9223372036854775808", "-9223372036854775809", "12a"] {
            #expect(JSONScalar.intValue(Array(text.utf8)) == nil, "\(text)")
        }
        for text in ["True", " true", "true ", "1", "", "fals"] {
            #expect(JSONScalar.boolValue(Array(text.utf8)) == nil, "\(text)")
        }
        // JSONDecoder still reads the forms left to it.
        #expect(try ValueSerializer<String>.json.decode(Array(#""\u0041\u00e9""#.utf8)) == "Aé")
        #expect(try ValueSerializer<Int>.json.decode(Array("-0".utf8)) == 0)
        #expect(throws: SyncError.self) { try ValueSerializer<Int>.json.decode(Array("9223372036854775808".utf8)) }
        #expect(throws: SyncError.self) { try ValueSerializer<String>.json.decode([0x22, 0xFF, 0x22]) }
    }

    /// Random bytes from JSON's own alphabet (quotes, escapes, digits, signs,
    /// control characters, UTF-8 and broken UTF-8): the serializer reads each
    /// exactly as `JSONDecoder` alone does, or refuses it as `JSONDecoder` does.
    @Test func everyInputReadsAsJSONDecoderReadsIt() {
        let pieces: [[UInt8]] = [
            [0x22], [0x22], [0x5C], [0x5C, 0x22], [0x5C, 0x5C], [0x5C, 0x2F], [0x5C, 0x6E], [0x5C, 0x74], [0x5C, 0x62],
            [0x5C, 0x75], Array("00e9".utf8), [0x5C, 0x78], Array("a".utf8), Array("Z".utf8), Array("/".utf8), Array(" ".utf8),
            Array("0".utf8), Array("7".utf8), Array("9".utf8), Array("-".utf8), Array("+".utf8), Array(".".utf8), Array("e".utf8),
            Array("true".utf8), Array("false".utf8), Array("null".utf8), [0x01], [0x1F], [0x7F], [0x0A], Array("é".utf8),
            Array("🎉".utf8), [0xC3], [0xFF], [0xED, 0xA0, 0x80],
        ]
        var random = SeededRandom(seed: 1_700)
        let decoder = JSONDecoder()
        var fastPathTaken = 0
        for _ in 0..<30_000 {
            var bytes: [UInt8] = []
            let quoted = Bool.random(using: &random)
            if quoted { bytes.append(0x22) }
            for _ in 0..<Int.random(in: 0...6, using: &random) { bytes += pieces.randomElement(using: &random)! }
            if quoted && Int.random(in: 0..<4, using: &random) > 0 { bytes.append(0x22) }
            let data = Data(bytes)
            #expect((try? ValueSerializer<String>.json.decode(bytes)) == (try? decoder.decode(String.self, from: data)), "\(bytes)")
            #expect((try? ValueSerializer<Int>.json.decode(bytes)) == (try? decoder.decode(Int.self, from: data)), "\(bytes)")
            #expect((try? ValueSerializer<Bool>.json.decode(bytes)) == (try? decoder.decode(Bool.self, from: data)), "\(bytes)")
            if JSONScalar.stringValue(bytes) != nil || JSONScalar.intValue(bytes) != nil || JSONScalar.boolValue(bytes) != nil { fastPathTaken += 1 }
        }
        // The alphabet reaches the direct path often, not only JSONDecoder.
        #expect(fastPathTaken > 3_000)
    }

    /// Whatever JSONEncoder writes for a string, integer or boolean reads back equal.
    @Test func whatJSONEncoderWritesReadsBack() throws {
        let encoder = JSONEncoder()
        var random = SeededRandom(seed: 1_701)
        let scalars: [Unicode.Scalar] = ["a", "\"", "\\", "/", "\u{0}", "\u{8}", "\u{1F}", "\u{7F}", "é", "\u{2028}", "🎉", "\u{FFFD}"]
        for _ in 0..<5_000 {
            var text = ""
            for _ in 0..<Int.random(in: 0...8, using: &random) { text.unicodeScalars.append(scalars.randomElement(using: &random)!) }
            #expect(try ValueSerializer<String>.json.decode([UInt8](encoder.encode(text))) == text)
            let number = Int.random(in: Int.min...Int.max, using: &random)
            #expect(try ValueSerializer<Int>.json.decode([UInt8](encoder.encode(number))) == number)
        }
        for flag in [true, false] { #expect(try ValueSerializer<Bool>.json.decode([UInt8](encoder.encode(flag))) == flag) }
    }
}

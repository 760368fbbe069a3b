import Foundation
@testable import SyncEngine
import SyncSim
import Testing

/// Every syntax error of a scenario or key file names its line, as the
/// contract of exit code 2 says: a number out of range (`1e400`), a lone
/// surrogate escape and a file that ends too early were reported with none.
@Suite struct JSONSyntaxLineTests {
    @Test(arguments: [
        ("{\n\"a\": 1,\n\"b\": 1e400\n}\n", 3),
        ("{\n\"a\": [1,\n -2E999]\n}", 3),
        ("{\n\"a\": \"ok\",\n\n\"b\": \"\\ud800\"\n}", 4),
        ("{\n\"a\": [1,\n  2,\n", 3),
        ("{\n\"a\": \"open\n", 2),
    ])
    func syntaxErrorNamesItsLine(text: String, line: Int) throws {
        let error = try #require(JSONSyntaxError(validating: Data(text.utf8)))
        #expect(error.line == line, "\(error.message)")
    }

    /// A lone surrogate escape was reported as Foundation says it ("unexpected
    /// end of file during string parse", or "unable to convert hex escape
    /// sequence"): the message names the escape now, with its line.
    @Test func aLoneSurrogateEscapeIsNamed() throws {
        for (text, escape, line) in [("{\n\"b\": \"\\ud800\"\n}", #"\ud800"#, 2), ("[\"ok\",\n\n\"\\uDC00\"]", #"\uDC00"#, 3),
                                     ("\"\\ud83d\\ude00 \\ud83d\"", #"\ud83d"#, 1)] {
            let error = try #require(JSONSyntaxError(validating: Data(text.utf8)), "\(text)")
            #expect(error.message.contains("a lone UTF-16 surrogate \(escape) is not a character"), "\(text): \(error.message)")
            #expect(error.line == line, "\(text): \(error.message)")
        }
        // Other errors, beside a pair, are reported as they are.
        for text in ["[\"\\ud83d\\ude00\", 1e400]", "{\"a\": \"\\ud83d\\ude00\""] {
            let other = try #require(JSONSyntaxError(validating: Data(text.utf8)), "\(text)")
            #expect(!other.message.contains("surrogate"), "\(text): \(other.message)")
        }
    }

    @Test func numbersInsideStringsAreNotTakenForTheBadOne() throws {
        let error = try #require(JSONSyntaxError(validating: Data("{\n\"n\": \"1e400\",\n\"m\": 1e400\n}".utf8)))
        #expect(error.line == 3, "\(error.message)")
    }

    /// A scenario saved as UTF-16 was refused as "the field '' is given twice
    /// in one object" (its NUL bytes taken for names): a file in UTF-16 or
    /// UTF-32, with a byte order mark or without, is now said not to be UTF-8.
    @Test func aFileInUTF16OrUTF32IsSaidNotToBeUTF8() throws {
        let text = #"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "timeline": []}"#
        for encoding: String.Encoding in [.utf16, .utf16LittleEndian, .utf16BigEndian, .utf32, .utf32LittleEndian, .utf32BigEndian] {
            let data = try #require(text.data(using: encoding))
            let error = try #require(JSONSyntaxError(validating: data), "\(encoding) was taken for JSON")
            #expect(error.message.contains("not UTF-8") && error.line == 1, "\(encoding): \(error.message)")
        }
        #expect(JSONSyntaxError(validating: Data(text.utf8)) == nil)

        let folder = TempFolder()
        let scenario = folder.file("utf16.json"), registry = folder.file("keys.json")
        try #require(text.data(using: .utf16)).write(to: URL(fileURLWithPath: scenario))
        try #require(#"{"keys": [{"name": "a"}]}"#.data(using: .utf16)).write(to: URL(fileURLWithPath: registry))
        #expect { _ = try Scenario.load(path: scenario) } throws: {
            ($0 as? ScenarioError)?.message.contains("not UTF-8") == true && !"\($0)".contains("given twice")
        }
        #expect { _ = try KeyRegistry.load(jsonFile: registry) } throws: { "\($0)".contains("not UTF-8") }
    }
}

import Foundation
@testable import SyncEngine
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

    @Test func numbersInsideStringsAreNotTakenForTheBadOne() throws {
        let error = try #require(JSONSyntaxError(validating: Data("{\n\"n\": \"1e400\",\n\"m\": 1e400\n}".utf8)))
        #expect(error.line == 3, "\(error.message)")
    }
}

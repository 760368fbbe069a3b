import Foundation
@testable import SyncEngine
import Testing

/// A keys file (`syncsim node --keys`, a scenario's `keysFile`) that gives a
/// field twice in one object was taken with one of the two values, silently:
/// `"security": "encrypted", ..., "security": "none"` left the key in plain
/// text, as the misspelled field the loader refuses would. It is refused,
/// naming the field and its line; the same field in two objects is fine.
@Suite struct RepeatedFieldTests {
    @Test func aKeysFileThatGivesAFieldTwiceIsRefused() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data("""
            {"keys": [
              {"name": "a", "availability": "all", "policy": "manual", "security": "none"},
              {"name": "b", "availability": "all", "policy": "manual", "security": "encrypted",
               "security": "none"}
            ]}
            """.utf8).write(to: URL(fileURLWithPath: path))
        #expect { _ = try KeyRegistry.load(jsonFile: path) } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .invalidConfiguration && error.message.contains("keys.json:4") && error.message.contains("'security' is given twice")
        }
    }

    @Test func theSameFieldInSeveralObjectsAndEscapedNamesAreRead() throws {
        #expect(JSONSyntaxError(validating: Data(#"{"a": [{"k": 1}, {"k": 2}], "b": {"k": {"k": 3}}, "\u006b": "x"}"#.utf8)) == nil)
        let repeated = JSONSyntaxError(validating: Data("{\"x\": 1,\n \"k\": 1, \"\\u006b\": 2}".utf8))
        #expect(repeated?.line == 2 && repeated?.message.contains("'k'") == true)
        #expect(JSONSyntaxError(validating: Data(#"[{"a": "}{,\"", "b": 1}, {"a": 2}]"#.utf8)) == nil)
    }
}

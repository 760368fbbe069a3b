import Foundation
import SyncEngine
import Testing

/// A keys file (`syncsim node --keys`, `KeyRegistry.load(jsonFile:)`) took
/// a field set to `null` as absent, so `"availability": null` made a key sync
/// both ways and `"security": null` stored it in plain text. A scenario's keys
/// refuse it; so does a keys file now, naming the file, line and field.
@Suite struct KeyFileNullFieldTests {
    @Test(arguments: ["availability", "policy", "security", "encoding", "family", "resolver", "legacyName", "type"])
    func aNullFieldIsRefusedByName(field: String) throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try "{\"keys\": [\n  {\"name\": \"a\"},\n  {\"name\": \"b\", \"\(field)\": null}\n]}\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try KeyRegistry.load(jsonFile: path)
        } throws: { error in
            let text = "\(error)"
            return (error as? SyncError)?.code == .invalidConfiguration && text.contains("keys.json:3")
                && text.contains("field 'keys[1].\(field)'") && text.contains("must not be null")
        }
    }

    @Test func absentFieldsStillTakeTheirDefaults() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try #"{"keys": [{"name": "a"}]}"#.write(toFile: path, atomically: true, encoding: .utf8)
        let key = try #require(try KeyRegistry.load(jsonFile: path).descriptors.first)
        #expect(key.availability == .all && key.policy == .automaticSmall && key.security == .none && key.encoding == "json")
    }
}

import Foundation
import SyncEngine
@testable import SyncSim
import Testing

/// A scenario `put` of a value that is not a JSON string into a key of
/// encoding `string` or `data` stored the JSON text, while `syncsim node`
/// refuses it. Refused now, naming the field and its line.
@Suite struct ScenarioRawPutTests {
    static func text(encoding: String, value: String) -> String {
        """
        {
          "description": "raw put",
          "seed": 1,
          "keys": [{"name": "s", "encoding": "\(encoding)"}],
          "timeline": [
            {"at": 0, "op": "put", "node": "phone", "key": "s",
             "value": \(value)}
          ]
        }
        """
    }

    @Test(arguments: ["string", "data"]) func aValueThatIsNotAStringIsRefused(encoding: String) throws {
        for value in ["1234", "{\"a\": 1}", "[\"x\"]", "true", "null"] {
            do {
                _ = try Scenario.parse(Self.text(encoding: encoding, value: value), file: "raw.json")
                Issue.record("\(value) was accepted for a key of encoding \(encoding)")
            } catch {
                #expect(error.line == 7, "\(value)")
                #expect(error.field.hasSuffix("value"), "\(value): \(error.field)")
                #expect(error.message.contains("JSON string"), "\(value): \(error.message)")
            }
        }
        _ = try Scenario.parse(Self.text(encoding: encoding, value: "\"text\""))
        _ = try Scenario.parse(Self.text(encoding: "json", value: "1234"))
    }
}

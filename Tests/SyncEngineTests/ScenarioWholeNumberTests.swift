import Foundation
@testable import SyncEngine
@testable import SyncSim
import Testing

/// A scenario `put` of a whole number past Int64 (`99999999999999999999`)
/// went through a Double and was stored rounded (`100000000000000000000`),
/// without a word, while `syncsim node`'s put keeps what it is given. Whole
/// numbers up to Int64 are stored exactly; one past it is refused, naming
/// the field and its line, so a scenario never writes what its file does not say.
@Suite struct ScenarioWholeNumberTests {
    static func text(value: String) -> String {
        """
        {
          "description": "whole numbers",
          "seed": 1,
          "keys": [{"name": "n"}],
          "timeline": [
            {"at": 0, "op": "put", "node": "phone", "key": "n",
             "value": \(value)},
            {"at": 10, "op": "checkpoint"}
          ]
        }
        """
    }

    /// 2^53 + 1 (the first whole number a Double cannot hold) and Int64's
    /// ends reach both stores byte for byte.
    @Test func wholeNumbersUpToInt64AreStoredExactly() async throws {
        let value = "[9007199254740993, \(Int64.max), \(Int64.min), {\"x\": -9007199254740993}]"
        let exact = "[9007199254740993,\(Int64.max),\(Int64.min),{\"x\":-9007199254740993}]"
        let scenario = try Scenario.parse(Self.text(value: value), file: "whole.json")
        let folder = TempFolder()
        var options = RunOptions()
        options.keepStoresIn = folder.path
        let report = try #require(await Simulation.run(scenario, name: "whole.json", options: options).report)
        #expect(report.passed, "\(report.text)")
        for (name, role) in [("phone-1001.sqlite", DeviceRole.phone), ("watch-2002.sqlite", .watch)] {
            let store = try SyncStore(path: folder.file(name), role: role, registry: try KeyRegistry(descriptors: scenario.keys))
            defer { store.close() }
            #expect(try store.rawValue(forKey: "n").map { String(decoding: $0, as: UTF8.self) } == exact, "\(name)")
        }
    }

    @Test func aWholeNumberPastInt64IsRefusedNamingItsField() throws {
        let cases = [
            ("99999999999999999999", "timeline[0].value"),
            ("9223372036854775808", "timeline[0].value"),
            ("-9223372036854775809", "timeline[0].value"),
            ("1e20", "timeline[0].value"),
            ("[1, {\"deep\": [2, 123456789012345678901234567890]}]", "timeline[0].value[1].deep[1]"),
        ]
        for (value, field) in cases {
            do {
                let scenario = try Scenario.parse(Self.text(value: value), file: "whole.json")
                Issue.record("\(value) was accepted: \(scenario.timeline.first.map { "\($0)" } ?? "")")
            } catch {
                #expect(error.field == field, "\(value): \(error)")
                #expect(error.line == 7, "\(value): \(error)")
                #expect(error.message.contains("out of range") && error.message.contains("\(Int64.max)"), "\(value): \(error)")
                // The error names the field, not the value (errors never print user values).
                #expect(!error.description.contains("99999999999999999999"), "\(error)")
            }
        }
        // A fraction stays a number (a Double, as `syncsim node` takes it).
        let fractions = try Scenario.parse(Self.text(value: "[0.5, -2.25, 1.5e-300]"))
        guard case .put(_, _, let value?, _) = fractions.timeline.first?.action else {
            Issue.record("no put: \(fractions.timeline)")
            return
        }
        #expect(value == .array([.number(0.5), .number(-2.25), .number(1.5e-300)]))
    }
}

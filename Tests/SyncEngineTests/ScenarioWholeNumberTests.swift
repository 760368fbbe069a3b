import Foundation
@testable import SyncEngine
@testable import SyncSim
import Testing

/// A scenario `put` keeps whole numbers exactly up to Int64: they decode as
/// Int64 before Double. (One past Int64 goes through a Double, as any number
/// with an exponent does: `99999999999999999999` is stored as `1e20` is.)
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
}

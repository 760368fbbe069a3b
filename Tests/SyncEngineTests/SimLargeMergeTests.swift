import Foundation
@_spi(Testing) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// Generated scenarios with a key of the `union` resolver (`k:set`) whose
/// values, some of them near or over the 100 KB limit, merge into larger
/// ones: values chunked, deferred to a manual sync and merged at versions
/// both sides hold.
@Suite struct SimLargeMergeTests {
    /// A `size` of a `union` key is a one-element array of that many serialized bytes.
    @Test func aSizedValueOfAUnionKeyIsAOneElementArray() throws {
        let runner = try ScenarioRunner<SimulatedScenarioLink>(scenario: Scenario(description: "sizes", seed: 1, keys: [], timeline: []))
        let union = KeyDescriptor(name: "k:set", availability: .all, policy: .automaticSmall, resolver: "union")
        for size in [5, 60, SyncPolicy.automaticLimit + 2] {
            let bytes = runner.valueBytes(descriptor: union, value: nil, size: size)
            #expect(bytes.count == size)
            let array = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String])
            #expect(array.count == 1 && array[0].utf8.count == size - 4)
        }
        let plain = KeyDescriptor(name: "k:plain", availability: .all, policy: .automaticSmall)
        #expect(runner.valueBytes(descriptor: plain, value: nil, size: 60).first == UInt8(ascii: "\""))
    }

    /// About 4 in 10 scenarios get `k:set`, with writes taken from the other
    /// keys' (the rest of each is the scenario its seed always gave); they
    /// run and pass, and some end with a merge of long strings over the limit.
    @Test func fuzzGeneratesLargeMergesThatConverge() async throws {
        let generator = ScenarioGenerator(ops: 80, appUpdates: false)
        let scenarios = (UInt64(1)...40).map(generator.scenario(seed:))
        let merging = scenarios.filter { $0.keys.contains { $0.name == ScenarioGenerator.mergedKey } }
        #expect(merging.count >= 8)
        func namesTheMergedKey(_ action: Scenario.Action) -> Bool {
            switch action {
            case .put(_, let key, _, _), .delete(_, let key): key == ScenarioGenerator.mergedKey
            default: false
            }
        }
        let plain = ScenarioGenerator(ops: 80, appUpdates: false, largeMerges: false).scenario(seed: merging[0].seed)
        #expect(!plain.keys.contains { $0.name == ScenarioGenerator.mergedKey })
        #expect(plain.timeline.count == merging[0].timeline.count)
        #expect(zip(plain.timeline, merging[0].timeline).allSatisfy { $0 == $1 || namesTheMergedKey($1.action) })
        #expect(merging.contains { s in
            s.timeline.contains { if case .put(_, ScenarioGenerator.mergedKey, nil, let size?) = $0.action { size > SyncPolicy.automaticLimit } else { false } }
        })
        var longestMerge = 0
        for scenario in merging.prefix(8) {
            #expect(try Scenario.parse(scenario.json) == scenario)
            let folder = TempFolder()
            var options = RunOptions()
            options.keepStoresIn = folder.path
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)", options: options).report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
            let phone = try #require(try FileManager.default.contentsOfDirectory(atPath: folder.path).first { $0.hasPrefix("phone") && $0.hasSuffix(".sqlite") })
            let store = try SyncStore(path: folder.file(phone), role: .phone, registry: try KeyRegistry(descriptors: scenario.keys.filter { $0.name == ScenarioGenerator.mergedKey }))
            if let bytes = try store.rawValue(forKey: ScenarioGenerator.mergedKey),
               let strings = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String],
               strings.filter({ $0.utf8.count >= 30_000 }).count >= 2 {
                longestMerge = max(longestMerge, bytes.count)
            }
            store.close()
        }
        #expect(longestMerge > SyncPolicy.automaticLimit, "no scenario ended with two long strings merged past the limit")
    }
}

import Foundation
@_spi(Benchmarks) @_spi(Testing) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// Scenarios where a node starts with an older app (`olderApps`: keys
/// declared otherwise, or missing) and is updated by an `updateApp` step:
/// what the two apps declare alike syncs all along, the rest only once they
/// agree, and the checker holds each node to its own app's declarations.
@Suite struct SimAppUpdateTests {
    static let fixture = SimScenarioTests.path("app-update")

    @Test func theFixtureSyncsWhatIsDeclaredAlikeAndTheRestAfterTheUpdate() async throws {
        let scenario = try Scenario.load(path: Self.fixture)
        #expect(scenario.olderApps.keys.sorted() == [.watch])
        #expect(scenario.keysDeclaredDifferently == ["workout:plan", "health:streak"])
        let folder = TempFolder()
        var options = RunOptions()
        options.keepStoresIn = folder.path
        let report = try #require(await Simulation.run(path: Self.fixture, options: options).report)
        #expect(report.passed, "\(report.text)")
        // At the end both hold the phone's plan and the watch's streak (written after its update).
        for name in ["phone-1001.sqlite", "watch-2002.sqlite"] {
            let role: DeviceRole = name.hasPrefix("phone") ? .phone : .watch
            let registry = try KeyRegistry(descriptors: scenario.keys)
            let store = try SyncStore(path: folder.file(name), role: role, registry: registry)
            #expect(try store.rawValue(forKey: "health:streak") == Array("14".utf8), "\(name)")
            #expect(try store.rawValue(forKey: "workout:plan") == Array(#"{"kind":"tempo","sets":3}"#.utf8), "\(name)")
            #expect(try store.rawValue(forKey: "settings:units") == Array(#""imperial""#.utf8), "\(name)")
            store.close()
        }
    }

    /// An engine that syncs keys declared differently is caught: the phone's
    /// entries of those keys go to the watch's older app.
    @Test func anEngineThatIgnoresTheDeclarationsIsCaught() async throws {
        let faults = try Simulation.testingFaults(named: ["ignore-key-mismatch"])
        let report = try #require(await Simulation.run(path: Self.fixture, options: RunOptions(testingFaults: faults)).report)
        let placement = try #require(report.invariants.first { $0.name == "placement" })
        #expect(!placement.passed)
        #expect(placement.violations.contains { $0.contains("sent a batch entry for health:streak to node 2002, whose app declares it differently") },
                "\(report.text)")
        #expect(report.replay.contains("--inject-fault ignore-key-mismatch"))
    }

    /// Over TCP too, though frames are checked after the step that sent them:
    /// each is held to the receiver's app as its connection opened.
    @Test func anEngineThatIgnoresTheDeclarationsIsCaughtOverTCP() async throws {
        let faults = try Simulation.testingFaults(named: ["ignore-key-mismatch"])
        let report = try #require(await Simulation.run(path: Self.fixture, options: RunOptions(testingFaults: faults), transport: .tcp).report)
        let placement = try #require(report.invariants.first { $0.name == "placement" })
        #expect(!placement.passed)
        #expect(placement.violations.contains { $0.contains("phone sent a batch entry for health:streak to node 2002, whose app declares it differently") },
                "\(report.text)")
    }

    @Test func olderAppsAndUpdatesAreReadCheckedAndWritten() throws {
        let text = """
        {"description": "d", "seed": 1, "watches": 2,
         "keys": [{"name": "a"}, {"name": "b", "policy": "manual"}, {"name": "day", "family": true}],
         "olderApps": {"watch2": [{"name": "a"}, {"name": "b"}], "phone": [{"name": "a"}]},
         "timeline": [
           {"at": 0, "op": "put", "node": "watch2", "key": "a", "value": 1},
           {"at": 5, "op": "updateApp", "node": "watch2"}
         ]}
        """
        let scenario = try Scenario.parse(text)
        #expect(scenario.olderApps[.watch2]?.map(\.name) == ["a", "b"])
        #expect(scenario.olderApps[.phone]?.map(\.name) == ["a"])
        #expect(scenario.keysDeclaredDifferently == ["b", "day"])
        #expect(scenario.timeline.last?.action == .updateApp(node: .watch2))
        #expect(try Scenario.parse(scenario.json) == scenario)

        func failure(_ text: String) -> ScenarioError? {
            do {
                _ = try Scenario.parse(text, file: "t.json")
                return nil
            } catch {
                return error
            }
        }
        // A node the scenario does not have.
        let unknownNode = failure(#"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "olderApps": {"watch2": []}, "timeline": []}"#)
        #expect(unknownNode?.field == "olderApps.watch2")
        // An update removes no key.
        let removed = failure(#"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "olderApps": {"watch": [{"name": "gone"}]}, "timeline": []}"#)
        #expect(removed?.field == "olderApps.watch")
        #expect(removed?.message.contains("'gone' is not in the scenario's keys") == true)
        // Only a node with an older app is updated.
        let noOlder = failure("""
        {"description": "d", "seed": 1, "keys": [{"name": "a"}],
         "timeline": [{"at": 0, "op": "updateApp", "node": "watch"}]}
        """)
        #expect(noOlder?.field == "timeline[0].node")
        #expect(noOlder?.message.contains("olderApps") == true)
    }

    /// A node running an older app may hold, of a key declared differently,
    /// only values written under its own declaration; once updated, any.
    @Test func theCheckerHoldsAnOlderAppToItsOwnDeclarations() throws {
        let current = KeyDescriptor(name: "plan", availability: .all, policy: .automaticSmall)
        var older = current
        older.policy = .manual
        let registry = try KeyRegistry(descriptors: [current])
        let phoneID: UInt32 = 1, watchID: UInt32 = 2
        let version = HLCTimestamp(packed: 5 << 16, node: phoneID)
        let entry = EntryInfo(key: "plan", encoding: "json", version: version, isDeleted: false, size: 1, changeSequence: 1,
                              lane: .automatic, isPending: false, isEncrypted: false)
        let watch = InvariantChecker.Snapshot(role: .watch, nodeID: watchID, entries: ["plan": entry], values: ["plan": [1]], name: "watch")
        var model = WriteModel()
        model.recordWrite(node: .phone, nodeID: phoneID, key: "plan", version: version, deleted: false, size: 1, declaration: current)

        var checker = InvariantChecker(registry: registry, declaredDifferently: ["plan"])
        checker.olderApps[watchID] = try KeyRegistry(descriptors: [older])
        checker.checkState(nodes: [watch], connected: [], model: model, label: "t")
        #expect(checker.log.results[.placement]!.violations.first?.contains("watch, which runs an older app, holds plan") == true)

        checker.olderApps[watchID] = nil  // the watch's app was updated
        var updated = InvariantChecker(registry: registry, declaredDifferently: ["plan"])
        updated.checkState(nodes: [watch], connected: [], model: model, label: "t")
        #expect(updated.log.results[.placement]!.passed)
    }

    /// About 2 in 10 generated scenarios start a node with an older app (most
    /// update it); the rest are the scenarios their seeds always gave. They run and pass.
    @Test func fuzzGeneratesOlderAppsAndUpdates() async throws {
        let generator = ScenarioGenerator(ops: 60)
        let scenarios = (UInt64(1)...60).map(generator.scenario(seed:))
        let older = scenarios.filter { !$0.olderApps.isEmpty }
        #expect(older.count >= 6)
        #expect(older.contains { s in s.timeline.contains { if case .updateApp = $0.action { true } else { false } } })
        let plain = ScenarioGenerator(ops: 60, appUpdates: false).scenario(seed: older[0].seed)
        #expect(plain.olderApps.isEmpty)
        #expect(plain.timeline == older[0].timeline.filter { if case .updateApp = $0.action { false } else { true } })
        for scenario in older {
            #expect(try Scenario.parse(scenario.json) == scenario)
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
        }
    }

    /// The shrinker drops an older app the failure does not need (and its
    /// `updateApp` steps), and keeps one it does.
    @Test func theShrinkerKeepsOlderAppsOnlyWhenTheFailureNeedsThem() async throws {
        let generator = ScenarioGenerator(ops: 60, powerCuts: false, largeMerges: false)
        func shrunk(seed: UInt64, fault: String) async throws -> Scenario {
            let scenario = generator.scenario(seed: seed)
            #expect(!scenario.olderApps.isEmpty, "seed \(seed) no longer gives an older app")
            let options = RunOptions(testingFaults: try Simulation.testingFaults(named: [fault]))
            let report = try #require(await Simulation.run(scenario, name: "s", options: options).report)
            #expect(!report.passed)
            return await Shrinker(options: options).shrink(scenario, failing: Set(report.failedInvariants))
        }
        // Dropping tombstones fails without any older app.
        let unrelated = try await shrunk(seed: 1, fault: "skip-tombstones")
        #expect(unrelated.olderApps.isEmpty)
        #expect(!unrelated.timeline.contains { if case .updateApp = $0.action { true } else { false } })
        #expect(try Scenario.parse(unrelated.json) == unrelated)
        // Syncing keys declared differently fails only with one.
        let needed = try await shrunk(seed: 10, fault: "ignore-key-mismatch")
        #expect(!needed.olderApps.isEmpty)
        #expect(try Scenario.parse(needed.json) == needed)
    }
}

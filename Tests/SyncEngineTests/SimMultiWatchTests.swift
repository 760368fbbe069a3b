import Foundation
@_spi(Testing) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// The simulator with a phone and up to three watches: the scenario format,
/// the per-watch links, the checker over every watch, power cuts inside
/// SQLite transactions, and the fuzzer generating all of it.
@Suite struct SimMultiWatchTests {
    func report(_ name: String, options: RunOptions = RunOptions(), transport: SimTransport = .sim) async throws -> SimReport {
        let outcome = await Simulation.run(path: SimScenarioTests.path(name), options: options, transport: transport)
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        return try #require(outcome.report)
    }

    func row(_ report: SimReport, _ role: String) throws -> SimReport.Node {
        try #require(report.nodes.first { $0.role == role })
    }

    /// Each watch resumes from its own cursor: what it receives is exactly the
    /// baseline plus what changed while it was away, never a second baseline.
    @Test func switchingWatchesResumesEachFromItsCursor() async throws {
        let report = try await report("watch-switch")
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.role) == ["phone", "watch", "watch2"])
        // watch2: 20 days + units at the baseline, the first watch's steps, 5 + 3 + 1 day changes and the new units.
        #expect(try row(report, "watch2").entriesReceived == 20 + 1 + 1 + 5 + 3 + 1 + 1)
        // watch: the baseline, then 5 while worn, 3 and the units after coming back, then 1 more.
        #expect(try row(report, "watch").entriesReceived == 20 + 1 + 5 + 3 + 1 + 1)
        // Each face stayed on its own watch: the phone received only the first watch's steps.
        #expect(try row(report, "phone").entriesReceived == 1)
    }

    @Test func twoWatchesConvergeThroughThePhone() async throws {
        let report = try await report("two-watches")
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.role) == ["phone", "watch", "watch2"])
        #expect(try row(report, "watch2").refusedWrites == 1)
    }

    /// Three watches over both transports: each writes, one is partitioned
    /// and replaced, another crashes and restarts; all converge through the phone.
    @Test(arguments: [SimTransport.sim, .tcp])
    func threeWatches(transport: SimTransport) async throws {
        let scenario = try Scenario.parse("""
        {"description": "three watches", "seed": 9, "watches": 3,
         "keys": [{"name": "steps"}, {"name": "face", "availability": "watchOnly"}, {"name": "units", "availability": "phoneWithWatchSync"}],
         "timeline": [
           {"at": 0, "op": "put", "node": "phone", "key": "units", "value": "metric"},
           {"at": 10, "op": "put", "node": "watch3", "key": "steps", "value": 3},
           {"at": 10, "op": "put", "node": "watch2", "key": "face", "value": "two"},
           {"at": 500, "op": "checkpoint"},
           {"at": 600, "op": "partition", "node": "watch3"},
           {"at": 700, "op": "put", "node": "watch", "key": "steps", "value": 1},
           {"at": 800, "op": "crash", "node": "watch2"},
           {"at": 900, "op": "checkpoint"},
           {"at": 1000, "op": "restart", "node": "watch2"},
           {"at": 1100, "op": "replaceWatch", "node": "watch3"},
           {"at": 1200, "op": "heal", "node": "watch3"},
           {"at": 1300, "op": "put", "node": "watch3", "key": "face", "value": "new three"},
           {"at": 3000, "op": "checkpoint"}
         ]}
        """)
        let outcome = await Simulation.run(scenario, name: "three", transport: transport)
        let report = try #require(outcome.report, "\(outcome.runError ?? "")")
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.role) == ["phone", "watch", "watch2", "watch3"])
        #expect(report.nodes.map(\.nodeID) == ["1001", "2002", "2003", "3003"])
        #expect(report.nodes.map(\.entries) == [2, 2, 3, 3])
    }

    /// A deliberately broken engine is caught with two watches too.
    @Test(arguments: [SimTransport.sim, .tcp])
    func brokenEngineIsCaughtWithTwoWatches(transport: SimTransport) async throws {
        let faults = try Simulation.testingFaults(named: ["skip-tombstones"])
        let report = try await report("two-watches", options: RunOptions(testingFaults: faults), transport: transport)
        #expect(!report.passed)
        #expect(!Set(report.failedInvariants).isDisjoint(with: ["no-resurrection", "convergence"]))
    }

    @Test func powerCutLandsInsideATransactionAndNothingAcknowledgedIsLost() async throws {
        let report = try await report("power-cut-mid-transaction")
        #expect(report.passed, "\(report.text)")
        #expect(report.powerCuts == 2)
        #expect(report.text.contains("2 power cuts armed"))
        #expect(report.json.contains("\"powerCuts\" : 2"))
        // The write made while the watch had no power, and the phone's write the cut landed in, were refused.
        #expect(try row(report, "watch").refusedWrites == 1)
        #expect(try row(report, "phone").refusedWrites == 1)
    }

    /// A watch, then the phone, runs out of disk: their own writes meanwhile
    /// are refused (one each), their sessions fail and start again, the
    /// watch restarts while still full (its store opens), and all converge
    /// once there is room, with nothing acknowledged lost.
    @Test(arguments: [SimTransport.sim, .tcp])
    func aFullDiskRefusesWritesAndAllConvergeOnceThereIsRoom(transport: SimTransport) async throws {
        let report = try await report("disk-full", transport: transport)
        #expect(report.passed, "\(report.text)")
        #expect(report.converged)
        #expect(report.powerCuts == nil)
        if transport == .sim { #expect(report.sessionFailures > 0) }  // the TCP link does not count failed sessions
        #expect(try row(report, "watch").refusedWrites == 1)
        #expect(try row(report, "phone").refusedWrites == 1)
        #expect(try row(report, "watch2").refusedWrites == 0)
        let scenario = try Scenario.load(path: SimScenarioTests.path("disk-full"))
        #expect(try Scenario.parse(scenario.json) == scenario)
        #expect(scenario.timeline.contains { $0.action == .fillDisk(node: .phone) })
    }

    /// About 2 in 10 generated scenarios fill a node's disk for a while,
    /// without changing the others; they run and pass.
    @Test func fuzzGeneratesFullDisks() async throws {
        let generator = ScenarioGenerator(ops: 60, largeMerges: false)
        let scenarios = (UInt64(1)...40).map(generator.scenario(seed:))
        func fills(_ scenario: Scenario) -> Bool { scenario.timeline.contains { if case .fillDisk = $0.action { true } else { false } } }
        let full = scenarios.filter(fills)
        #expect(full.count >= 3)
        #expect(full.contains { s in s.timeline.contains { if case .freeDisk = $0.action { true } else { false } } })
        let plain = ScenarioGenerator(ops: 60, largeMerges: false, diskFull: false).scenario(seed: full[0].seed)
        #expect(!fills(plain))
        #expect(plain.timeline == full[0].timeline.filter { step in
            switch step.action {
            case .fillDisk, .freeDisk: false
            default: true
            }
        })
        for scenario in full.prefix(4) {
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
        }
    }

    /// With acknowledgements sent before the batch is synced (the engine before
    /// durable acknowledgements), a power cut loses acknowledged entries, and
    /// the checker says so; with the engine as it is, no cut loses anything.
    @Test func unsyncedAcknowledgementsLoseEntriesAndAreCaught() async throws {
        var caught = 0
        for operations in [4, 8, 16, 24, 32, 48] {
            let scenario = try Scenario.parse("""
            {"description": "a cut after acknowledgements", "seed": 5,
             "keys": [{"name": "day", "family": true}],
             "timeline": [
               \((1...40).map { "{\"at\": \($0 * 20), \"op\": \"put\", \"node\": \"phone\", \"key\": \"day:\($0)\", \"size\": 2000}," }.joined(separator: "\n"))
               {"at": 0, "op": "powerCut", "node": "watch", "afterOperations": \(operations)},
               {"at": 3000, "op": "restart", "node": "watch"},
               {"at": 6000, "op": "checkpoint"}
             ]}
            """)
            let good = try await ScenarioRunner<SimulatedScenarioLink>(scenario: scenario).run()
            #expect(good.passed, "\(good.text)")
            var broken = RunOptions()
            broken.durableAcknowledgements = false
            let bad = try await ScenarioRunner<SimulatedScenarioLink>(scenario: scenario, options: broken).run()
            if !bad.passed {
                caught += 1
                #expect(!Set(bad.failedInvariants).isDisjoint(with: ["convergence", "no-lost-acknowledged-write"]), "\(bad.text)")
            }
        }
        #expect(caught > 0)
    }

    @Test func aStepNamingAnUndeclaredWatchIsRefusedWithItsLine() {
        let text = """
        {"description": "one watch", "seed": 1,
         "keys": [{"name": "a"}],
         "timeline": [
           {"at": 0, "op": "put", "node": "watch", "key": "a", "value": 1},
           {"at": 1, "op": "put", "node": "watch2", "key": "a", "value": 2}
         ]}
        """
        do {
            _ = try Scenario.parse(text, file: "t.json")
            Issue.record("parsed")
        } catch {
            #expect(error.field == "timeline[1].node")
            #expect(error.line == 5)
            #expect(error.description.contains("\"watches\": 2"))
        }
        #expect(throws: ScenarioError.self) {
            try Scenario.parse(#"{"description": "d", "seed": 1, "watches": 4, "keys": [], "timeline": []}"#)
        }
        // A link step names a watch, not the phone.
        #expect(throws: ScenarioError.self) {
            try Scenario.parse(#"{"description": "d", "seed": 1, "keys": [], "timeline": [{"at": 0, "op": "partition", "node": "phone"}]}"#)
        }
    }

    @Test func newFieldsRoundTrip() throws {
        let text = """
        {"description": "d", "seed": 1, "watches": 3, "keys": [{"name": "a"}],
         "timeline": [
           {"at": 0, "op": "partition", "node": "watch3"},
           {"at": 1, "op": "faults", "node": "watch2", "faults": {"lossRate": 0.5}},
           {"at": 2, "op": "heal"},
           {"at": 3, "op": "replaceWatch", "node": "watch2"},
           {"at": 4, "op": "powerCut", "node": "watch3", "afterOperations": 7}
         ]}
        """
        let scenario = try Scenario.parse(text)
        #expect(scenario.watches == 3)
        #expect(scenario.timeline.map(\.action) == [
            .partition(node: .watch3), .faults(LinkFaults(lossRate: 0.5), node: .watch2), .heal(node: nil),
            .replaceWatch(node: .watch2), .powerCut(node: .watch3, afterOperations: 7),
        ])
        let again = try Scenario.parse(scenario.json)
        #expect(again == scenario)
    }

    /// The checker compares the phone with every connected watch, and keeps a
    /// watch's watchOnly value on that watch.
    @Test func checkerSeesEveryWatch() throws {
        let registry = try KeyRegistry(descriptors: [
            KeyDescriptor(name: "steps", availability: .all, policy: .automaticSmall),
            KeyDescriptor(name: "face", availability: .watchOnly, policy: .automaticSmall),
        ])
        func entry(_ key: String, _ time: Int64, node: UInt32) -> EntryInfo {
            EntryInfo(key: key, encoding: "json", version: HLCTimestamp(packed: time << 16, node: node), isDeleted: false, size: 1,
                      changeSequence: 1, lane: .automatic, isPending: false, isEncrypted: false)
        }
        func snapshot(_ role: DeviceRole, _ id: UInt32, _ name: String, _ entries: [EntryInfo]) -> InvariantChecker.Snapshot {
            .init(role: role, nodeID: id, entries: Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0) }),
                  values: Dictionary(uniqueKeysWithValues: entries.map { ($0.key, [1]) }), name: name)
        }
        let phone = snapshot(.phone, 1, "phone", [entry("steps", 5, node: 2)])
        let watch = snapshot(.watch, 2, "watch", [entry("steps", 5, node: 2), entry("face", 1, node: 2)])
        let stale = snapshot(.watch, 3, "watch2", [entry("steps", 4, node: 1)])
        let leaked = snapshot(.watch, 3, "watch2", [entry("steps", 5, node: 2), entry("face", 1, node: 2)])

        var checker = InvariantChecker(registry: registry)
        checker.checkState(nodes: [phone, watch, stale], connected: [2], model: WriteModel(), label: "t")
        #expect(checker.log.results[.convergence]!.passed, "watch2 is not connected: not expected to have converged")
        checker.checkState(nodes: [phone, watch, stale], connected: [2, 3], model: WriteModel(), label: "t")
        #expect(checker.log.results[.convergence]!.violations.first?.contains("watch2") == true)

        var other = InvariantChecker(registry: registry)
        other.checkState(nodes: [phone, watch, leaked], connected: [2, 3], model: WriteModel(), label: "t")
        #expect(other.log.results[.convergence]!.passed)
        #expect(other.log.results[.placement]!.violations.first?.contains("watch2 holds watchOnly/automaticSmall key face written by node 2") == true)
    }

    /// Generated scenarios have one to three watches and power cuts; they run, and round-trip through their files.
    @Test func fuzzGeneratesSeveralWatchesAndPowerCuts() async throws {
        let generator = ScenarioGenerator(ops: 40)
        let scenarios = (1...30).map { generator.scenario(seed: UInt64($0)) }
        #expect(Set(scenarios.map(\.watches)) == [1, 2, 3])
        #expect(scenarios.contains { $0.timeline.contains { if case .powerCut = $0.action { true } else { false } } })
        #expect(scenarios.contains { s in s.timeline.contains { if case .put(.watch3, _, _, _) = $0.action { true } else { false } } })
        for scenario in scenarios { #expect(try Scenario.parse(scenario.json) == scenario) }
        // A scenario with several watches and a power cut, run from its file, gives the same report again.
        let cut = try #require(scenarios.first { s in s.watches > 1 && s.timeline.contains { if case .powerCut = $0.action { true } else { false } } })
        let first = try #require(await Simulation.run(cut, name: "f").report)
        let again = try #require(await Simulation.run(try Scenario.parse(cut.json), name: "f").report)
        #expect(first.text == again.text)
        #expect(first.powerCuts ?? 0 > 0)
        let fuzzer = Fuzzer(runs: 12, seed: 1, ops: 40)
        let (completed, failure) = await fuzzer.run { _, _ in }
        #expect(completed == 12)
        #expect(failure == nil, "\(failure?.detail ?? "")")
    }

    /// About 3 in 10 generated scenarios purge tombstones (a short retention,
    /// `purge` steps) without changing the others; they run and pass, and
    /// some of them do purge.
    @Test func fuzzGeneratesTombstonePurges() async throws {
        let generator = ScenarioGenerator(ops: 60, largeMerges: false)
        let scenarios = (UInt64(1)...60).map(generator.scenario(seed:))
        let purging = scenarios.filter { $0.tombstoneRetentionMs != nil }
        #expect(purging.count >= 8)
        #expect(purging.allSatisfy { s in s.timeline.contains { if case .purge = $0.action { true } else { false } } })
        let plain = ScenarioGenerator(ops: 60, purges: false, largeMerges: false).scenario(seed: purging[0].seed)
        #expect(plain.tombstoneRetentionMs == nil && !plain.timeline.contains { if case .purge = $0.action { true } else { false } })
        #expect(purging.contains { $0.peerHorizonMs != nil } && purging.contains { $0.peerHorizonMs == nil })
        var purged = 0, forgotten = 0
        for scenario in purging {
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
            purged += (report.tombstonePurge ?? []).filter { $0.purgedThroughMs != nil }.count
            forgotten += (report.tombstonePurge ?? []).map(\.forgottenPeers.count).reduce(0, +)
        }
        #expect(purged > 0, "no generated scenario purged a tombstone")
        #expect(forgotten > 0, "no generated scenario forgot a watch")
    }

    /// The shrinker drops watches no remaining step names.
    @Test func shrinkerDropsUnusedWatches() async throws {
        let faults = try Simulation.testingFaults(named: ["skip-tombstones"])
        let scenario = try Scenario.parse("""
        {"description": "d", "seed": 1, "watches": 3, "keys": [{"name": "a"}],
         "timeline": [
           {"at": 0, "op": "put", "node": "phone", "key": "a", "value": 1},
           {"at": 10, "op": "skew", "node": "watch3", "ms": 1000},
           {"at": 500, "op": "delete", "node": "phone", "key": "a"},
           {"at": 1000, "op": "checkpoint"}
         ]}
        """)
        let shrunk = await Shrinker(maxRuns: 40, options: RunOptions(testingFaults: faults)).shrink(scenario, failing: ["no-resurrection", "convergence"])
        #expect(shrunk.timeline.count < scenario.timeline.count)
        #expect(shrunk.watches == 1, "\(shrunk.json)")
        let replay = await Simulation.run(try Scenario.parse(shrunk.json), name: "min", options: RunOptions(testingFaults: faults))
        #expect(replay.report?.passed == false)
    }
}

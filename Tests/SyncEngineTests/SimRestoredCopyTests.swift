import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// `replaceWatch` with `restoredFrom`: a watch set up from a backup of a
/// watch's store (its own, or another's that stays paired), found copied at
/// open, under a new node id, checked like any other.
@Suite struct SimRestoredCopyTests {
    @Test func restoredFromRoundTripsAndNamesAWatch() throws {
        let text = """
        {"description": "d", "seed": 1, "watches": 2, "keys": [{"name": "a"}],
         "timeline": [{"at": 0, "op": "replaceWatch", "node": "watch2", "restoredFrom": "watch"}, {"at": 1, "op": "replaceWatch"}]}
        """
        let scenario = try Scenario.parse(text)
        #expect(scenario.timeline.map(\.action) == [.replaceWatch(node: .watch2, restoredFrom: .watch), .replaceWatch(node: nil)])
        #expect(scenario.restoresBackups)
        #expect(try Scenario.parse(scenario.json) == scenario)
        for bad in ["\"phone\"", "\"watch3\"", "\"elsewhere\""] {
            #expect(throws: ScenarioError.self, "restoredFrom \(bad)") {
                try Scenario.parse("""
                {"description": "d", "seed": 1, "watches": 2, "keys": [], "timeline": [{"at": 0, "op": "replaceWatch", "restoredFrom": \(bad)}]}
                """)
            }
        }
    }

    /// `"marker": false`: the copy's app keeps no device marker; only with `restoredFrom`.
    @Test func markerFalseRoundTripsAndNeedsACopy() throws {
        let scenario = try Scenario.parse("""
        {"description": "d", "seed": 1, "watches": 2, "keys": [],
         "timeline": [{"at": 0, "op": "replaceWatch", "node": "watch2", "restoredFrom": "watch", "marker": false}]}
        """)
        #expect(scenario.timeline.map(\.action) == [.replaceWatch(node: .watch2, restoredFrom: .watch, marker: false)])
        #expect(try Scenario.parse(scenario.json) == scenario)
        #expect(throws: ScenarioError.self) {
            try Scenario.parse("""
            {"description": "d", "seed": 1, "watches": 2, "keys": [], "timeline": [{"at": 0, "op": "replaceWatch", "marker": false}]}
            """)
        }
    }

    /// A marker-less copy whose queued messages reach a phone that binds its
    /// node id to its source's pairing (the phone was cut off and came back
    /// meanwhile) is refused through its mailbox: it said first that it
    /// renews, so it takes its own node id (3004) and its source keeps its
    /// (before, the phone gave the node id to the copy's pairing and refused
    /// the source at its next live session). Everything converges.
    @Test func aCopyReachingThePhoneThroughItsMailboxTakesItsOwnNodeID() async throws {
        let scenario = try Scenario.parse(#"""
        {"description":"a copy without its marker reaches, through its mailbox, a phone that binds its node id to its source","faults":{"duplicateRate":0.04,"jitterMs":4,"latencyMs":49,"lossRate":0.16,"reorderRate":0.17},"keys":[{"availability":"all","name":"k:all-auto","policy":"automaticSmall","security":"none"},{"availability":"phoneWithWatchSync","name":"k:phone-sync","policy":"automaticSmall","security":"none"}],"mailbox":true,"seed":98000637,"settleLimitMs":300000,"timeline":[{"at":3503,"node":"watch2","op":"replaceWatch","restoredFrom":"watch2"},{"afterOperations":9,"at":3778,"node":"phone","op":"powerCut"},{"at":8590,"key":"k:phone-sync","node":"phone","op":"put","value":"v47"},{"at":8686,"marker":false,"node":"watch","op":"replaceWatch","restoredFrom":"watch2"},{"at":9071,"node":"watch","op":"partition"},{"at":9177,"key":"k:all-auto","node":"watch2","op":"put","value":"v4"},{"at":9920,"node":"phone","op":"restart"},{"at":9966,"node":"watch","op":"restart"},{"at":10660,"node":"watch2","op":"crash"}],"watches":2}
        """#)
        let outcome = await Simulation.run(scenario, name: "copy-refused-queued")
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
        // phone, watch (the copy, 3003 until its phone refused it), watch2 (its source)
        #expect(report.nodes.map(\.nodeID) == ["1001", "3004", "3003"])
    }

    /// A copy without its marker and its source, both reached only through
    /// their mailboxes (behind a partition), name the same node id from two
    /// pairings. Each says first that it renews (`renewsNodeID`), so the
    /// phone refuses the copy's node id through its mailbox, and the copy
    /// takes its own (3003). Before, the phone served them as watches before
    /// protocol 6: the node id followed the pairing of the last message read,
    /// a baseline at each switch, each acknowledged through the other mailbox,
    /// which switched it back; the mailboxes never went quiet (the phone sent
    /// its one entry 235 times) until a live session refused one.
    @Test func aCopyAndItsSourceOnlyThroughTheirMailboxesGoQuiet() async throws {
        let scenario = try Scenario.parse(#"""
        {"description":"a copy without its marker and its source, both behind a partition, reached only through their mailboxes","keys":[{"availability":"all","name":"k:set","policy":"automaticSmall","resolver":"union","security":"none"}],"mailbox":true,"seed":98000672,"settleLimitMs":300000,"timeline":[{"at":5469,"op":"partition"},{"at":6147,"marker":false,"node":"watch2","op":"replaceWatch","restoredFrom":"watch"},{"at":6247,"key":"k:set","node":"watch","op":"put","size":102398},{"at":6897,"op":"partition"},{"at":6993,"op":"checkpoint"}],"watches":2}
        """#)
        let report = try #require(await Simulation.run(scenario, name: "mailboxes-only").report)
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.nodeID) == ["1001", "2002", "3003"])
        #expect(report.nodes[0].entriesSent <= 4, "the phone sends its one entry to each watch, not at each switch: \(report.text)")
    }

    /// `copy-caught-through-mailbox`: behind a partition the copy is caught
    /// through its mailbox and takes its own node id (the source keeps its);
    /// over TCP too, where the mailbox carries everything while partitioned.
    @Test(arguments: [SimTransport.sim, .tcp])
    func aCopyCaughtThroughItsMailboxTakesItsOwnNodeID(transport: SimTransport) async throws {
        let outcome = await Simulation.run(path: SimScenarioTests.path("copy-caught-through-mailbox"), transport: transport)
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.nodeID) == ["1001", "2002", "3003"])
    }

    /// Over TCP a watch that took a new node id during the run (refused for
    /// its own) is known by it from then on: its frames are recorded under
    /// it, with the syncs counted for it, rather than under the id it
    /// started with (whose checks, keyed by the sender, then found nothing).
    @Test func tcpFramesOfARenamedWatchAreRecordedUnderItsNewID() throws {
        let link = TCPLinkState()
        let registry = try KeyRegistry(descriptors: [KeyDescriptor(name: "k", availability: .all, policy: .automaticSmall)])
        let phone = TCPLinkState.App(nodeID: 0x1001, registry: registry)
        link.setApp(TCPLinkState.App(nodeID: 0x3003, registry: registry), of: .watch2)
        link.noteSync(nodeID: 0x3003)
        let frame = Frame(type: 0x08, payload: [1])  // only recorded, never decoded here
        link.record(frame, role: .watch, from: .watch2, fallback: 0x3003, to: phone)
        link.renamed(.watch2, from: 0x3003, to: 0xABCD)
        link.noteSync(nodeID: 0xABCD)
        link.record(frame, role: .watch, from: .watch2, fallback: 0x3003, to: phone)
        let sent = link.drainSent()
        #expect(sent.map(\.nodeID) == [0x3003, 0xABCD])
        #expect(sent.map(\.syncsVisible) == [1, 2])
        #expect(link.app(of: .watch2)?.nodeID == 0xABCD)
    }

    /// Each restored watch took the node id the simulator gave it, and holds
    /// the face it was restored with (written by the watch it came from)
    /// beside its own writes. In `restored-copy` each store found itself
    /// copied at open (the run fails otherwise). In `copy-caught-by-phone`
    /// the copies' apps keep no device marker: each opened with the node id
    /// it was copied with and wrote under it until its phone refused it
    /// (`node-id-conflict`), then took its new one, was baselined, and synced.
    @Test(arguments: ["restored-copy", "copy-caught-by-phone"], [SimTransport.sim, .tcp])
    func aRestoredWatchSyncsAsTheNewDeviceItIs(fixture: String, transport: SimTransport) async throws {
        let outcome = await Simulation.run(path: SimScenarioTests.path(fixture), transport: transport)
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.nodeID) == ["1001", "3004", "3003"])
        #expect(report.nodes.allSatisfy { $0.entries == 4 || $0.role == "phone" })
        let refused = fixture == "copy-caught-by-phone" ? "(2 failed)" : "(0 failed)"
        if transport == .sim { #expect(report.text.contains(refused), "sessions refused: \(report.text)") }
    }

    /// The checker lets a restored watch hold the local-only values of the
    /// store it came from (and of that store's source), and no other watch's.
    @Test func aRestoredWatchMayHoldItsSourcesLocalValues() throws {
        let registry = try KeyRegistry(descriptors: [KeyDescriptor(name: "face", availability: .watchOnly, policy: .automaticSmall)])
        func snapshot(_ id: UInt32, face writer: UInt32) -> InvariantChecker.Snapshot {
            let info = EntryInfo(key: "face", encoding: "json", version: HLCTimestamp(packed: 1 << 16, node: writer), isDeleted: false,
                                 size: 1, changeSequence: 1, lane: .automatic, isPending: false, isEncrypted: false)
            return .init(role: .watch, nodeID: id, entries: ["face": info], values: ["face": [1]], name: "watch\(id)")
        }
        var checker = InvariantChecker(registry: registry)
        checker.inherit(3, from: 2)
        checker.inherit(4, from: 3)
        checker.checkState(nodes: [snapshot(3, face: 2), snapshot(4, face: 2)], connected: [], model: WriteModel(), label: "t")
        #expect(checker.log.results[.placement]!.passed)
        checker.checkState(nodes: [snapshot(5, face: 2)], connected: [], model: WriteModel(), label: "t")
        #expect(checker.log.results[.placement]!.violations.first?.contains("written by node 2") == true)
    }

    /// Generated scenarios restore backups at some `replaceWatch` steps, from
    /// a stream of their own: without them each is the scenario its seed
    /// gave before. Some run, and pass.
    @Test func fuzzGeneratesRestoredCopies() async throws {
        let generator = ScenarioGenerator(ops: 150)
        let plain = ScenarioGenerator(ops: 150, restoredCopies: false)
        var restoring: [Scenario] = []
        for seed in UInt64(1)...80 {
            let scenario = generator.scenario(seed: seed)
            var stripped = scenario
            stripped.timeline = scenario.timeline.map { step in
                guard case .replaceWatch(let node, _, _) = step.action else { return step }
                return Scenario.Step(at: step.at, .replaceWatch(node: node))
            }
            #expect(stripped == plain.scenario(seed: seed), "seed \(seed)")
            if scenario.restoresBackups { restoring.append(scenario) }
        }
        #expect(restoring.count >= 5)
        #expect(restoring.contains { s in s.timeline.contains { if case .replaceWatch(let n, let source?, _) = $0.action { (n ?? .watch) != source } else { false } } })
        let unmarked = restoring.filter { s in s.timeline.contains { if case .replaceWatch(_, .some, false) = $0.action { true } else { false } } }
        #expect(unmarked.count >= 2, "some copies keep no marker: their phone catches them")
        #expect(unmarked.contains { $0.mailbox }, "live or through the mailbox")
        for scenario in restoring.prefix(6) + unmarked.prefix(3) {
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
        }
    }
}

import Foundation
@_spi(Benchmarks) @_spi(Testing) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// Scenarios with `"mailbox": true`: queued delivery goes on while a node is
/// not running or its link is partitioned, and the checker covers it.
@Suite struct SimMailboxTests {
    static let fixture = SimScenarioTests.path("queued-while-down")

    @Test func theFixtureChecksQueuedDelivery() async throws {
        let scenario = try Scenario.load(path: Self.fixture)
        #expect(scenario.mailbox)
        let report = try #require(await Simulation.run(path: Self.fixture).report)
        #expect(report.passed, "\(report.text)")
        let queued = try #require(report.invariants.first { $0.name == "queued-delivery" })
        #expect(queued.passed && queued.checks >= 4)
        // Without a mailbox the report has no such line (reports of other scenarios are unchanged).
        var live = scenario
        live.mailbox = false
        let liveReport = try #require(await Simulation.run(live, name: "live").report)
        #expect(!liveReport.invariants.contains { $0.name == "queued-delivery" })
    }

    /// At t=600 the watch runs behind a partition: only the mailbox can have
    /// brought it the phone's delete, so a fault that drops deletes is caught
    /// there, and is not without the mailbox (the watch is then checked alone).
    @Test func theWatchBehindThePartitionIsCheckedThroughTheMailbox() async throws {
        let faults = try Simulation.testingFaults(named: ["skip-tombstones"])
        let report = try #require(await Simulation.run(path: Self.fixture, options: RunOptions(testingFaults: faults)).report)
        let violations = report.invariants.flatMap(\.violations)
        #expect(violations.contains { $0.hasPrefix("checkpoint t=600") }, "\(report.text)")

        var live = try Scenario.load(path: Self.fixture)
        live.mailbox = false
        let liveReport = try #require(await Simulation.run(live, name: "live", options: RunOptions(testingFaults: faults)).report)
        #expect(!liveReport.invariants.flatMap(\.violations).contains { $0.hasPrefix("checkpoint t=600") }, "\(liveReport.text)")
    }

    @Test func queuedMessagesGoThroughThePlacementChecks() throws {
        let token = Key<String>("token", default: "", availability: .phoneOnly, policy: .automaticSmall)
        let steps = Key<Int>("steps", default: 0, availability: .all, policy: .automaticSmall)
        var checker = InvariantChecker(registry: try KeyRegistry([token, steps]))
        let header = QueuedHeader(protocolVersion: 1, node: 1, role: .phone, pairingEpoch: "e", registryFingerprint: [])
        func entry(_ key: String) -> WireEntry {
            WireEntry(key: key, version: HLCTimestamp(packed: 1 << 16, node: 1), base: .zero, deleted: false, encoding: "json", value: Array("1".utf8))
        }
        checker.observeQueued(.batch(header, after: 0, through: 1, entries: [entry("steps")]), from: .phone, senderID: 1, model: WriteModel(), at: 0)
        #expect(checker.log.results[.placement]!.passed)
        checker.observeQueued(.batch(header, after: 1, through: 2, entries: [entry("token")]), from: .phone, senderID: 1, model: WriteModel(), at: 5)
        #expect(!checker.log.results[.placement]!.passed)
        #expect(checker.log.results[.placement]!.violations.first?.contains("token") == true)
        checker.observeQueued(.refusal(header, code: "key-declaration-mismatch", message: "another registry"), from: .watch, senderID: 2,
                              model: WriteModel(), at: 7)
        #expect(!checker.log.results[.queuedDelivery]!.passed)
    }

    /// A spool of three messages and one entry per queued batch
    /// (`mailboxMessages`, `queuedBatchEntries`): what the mailbox carries
    /// takes several reads, and every invariant still holds. The fields
    /// round-trip, need a mailbox, and the fuzzer gives them to some scenarios.
    @Test func aSmallSpoolAndSmallBatchesStillPass() async throws {
        var scenario = try Scenario.load(path: Self.fixture)
        scenario.mailboxMessages = 3
        scenario.queuedBatchEntries = 1
        let report = try #require(await Simulation.run(scenario, name: "small-spool").report)
        #expect(report.passed, "\(report.text)")
        let parsed = try Scenario.parse(String(decoding: try JSONEncoder().encode(scenario), as: UTF8.self))
        #expect(parsed.mailboxMessages == 3 && parsed.queuedBatchEntries == 1)
        for field in ["mailboxMessages", "queuedBatchEntries"] {
            do {
                _ = try Scenario.parse(SimTombstonePurgeTests.scenario(#", "\#(field)": 4"#))
                Issue.record("\(field) without a mailbox was taken")
            } catch {
                #expect(error.message.contains("needs \"mailbox\": true"), "\(error)")
            }
        }
        #expect(throws: ScenarioError.self) { _ = try Scenario.parse(SimTombstonePurgeTests.scenario(#", "mailbox": true, "mailboxMessages": 2"#)) }
        let generated = (UInt64(1)...60).map(ScenarioGenerator(ops: 50).scenario(seed:))
        #expect(generated.contains { $0.mailboxMessages != nil && $0.queuedBatchEntries != nil })
        #expect(generated.allSatisfy { $0.mailbox || ($0.mailboxMessages == nil && $0.queuedBatchEntries == nil) })
    }

    @Test func fuzzScenariosWithAMailboxTakeANodeDownAndPass() async throws {
        let generator = ScenarioGenerator(ops: 50)
        let queued = (UInt64(1)...40).map(generator.scenario(seed:)).filter(\.mailbox)
        #expect(queued.count >= 5)
        for scenario in queued.prefix(4) {
            #expect(scenario.timeline.contains { if case .crash = $0.action { true } else { false } })
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
            #expect(report.invariants.contains { $0.name == "queued-delivery" && $0.checks > 0 })
        }
        #expect(ScenarioGenerator(ops: 50, mailbox: false).scenario(seed: queued[0].seed).mailbox == false)
    }
}

import Foundation
@_spi(Testing) @testable import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// Scenarios where a node's app speaks older session protocols only
/// (`olderProtocols`) until an `updateApp` step: what users run while the
/// phone's app is updated before the watch's, or the other way round.
@Suite struct SimOlderProtocolTests {
    static let fixture = SimScenarioTests.path("older-protocols")

    @Test func theFixtureConvergesBeforeAndAfterTheUpdate() async throws {
        let scenario = try Scenario.load(path: Self.fixture)
        #expect(scenario.olderProtocols == [.watch: 1, .watch2: 4])
        let report = try #require(await Simulation.run(path: Self.fixture).report)
        #expect(report.passed, "\(report.text)")
    }

    @Test func theFixtureConvergesOverTCP() async throws {
        let report = try #require(await Simulation.run(path: Self.fixture, transport: .tcp).report)
        #expect(report.passed, "\(report.text)")
    }

    /// Each node's sessions and mailbox driver take its app's protocols (every
    /// link asks `RunState.replication(of:epoch:)`); an update gives it this build's.
    @Test func aNodeSpeaksItsAppsProtocolsUntilUpdated() throws {
        let scenario = try Scenario.load(path: Self.fixture)
        let state = try RunState(scenario: scenario, options: RunOptions(), folderPrefix: "older-protocols-")
        defer { try? FileManager.default.removeItem(atPath: state.folder) }
        let current = ReplicationConfiguration().protocolRange
        #expect(state.replication(of: state.node(.phone), epoch: "e").protocolRange == current)
        #expect(state.replication(of: state.node(.watch), epoch: "e").protocolRange == 1...1)
        #expect(state.replication(of: state.node(.watch2), epoch: "e").protocolRange == 1...4)
        #expect(state.replication(of: state.node(.watch2), epoch: "e").pairingEpoch == "e")
        state.updateApp(of: state.node(.watch))
        #expect(state.replication(of: state.node(.watch), epoch: "e").protocolRange == current)
    }

    @Test func olderProtocolsAreReadCheckedAndWritten() throws {
        let text = """
        {"description": "d", "seed": 1, "watches": 2, "keys": [{"name": "a"}],
         "olderProtocols": {"watch2": 3, "phone": 1},
         "timeline": [{"at": 5, "op": "updateApp", "node": "watch2"}]}
        """
        let scenario = try Scenario.parse(text)
        #expect(scenario.olderProtocols == [.watch2: 3, .phone: 1])
        #expect(scenario.olderApps.isEmpty)
        #expect(scenario.timeline.last?.action == .updateApp(node: .watch2))
        #expect(try Scenario.parse(scenario.json) == scenario)
        func failure(_ protocols: String) -> ScenarioError? {
            do {
                _ = try Scenario.parse(#"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "olderProtocols": \#(protocols), "timeline": []}"#)
                return nil
            } catch {
                return error
            }
        }
        #expect(failure(#"{"watch2": 2}"#)?.field == "olderProtocols.watch2")  // a node the scenario does not have
        #expect(failure(#"{"watch": 0}"#)?.field == "olderProtocols.watch")
        #expect(failure(#"{"watch": \#(Scenario.currentProtocol + 1)}"#)?.field == "olderProtocols.watch")
        #expect(failure(#"{"watch": "4"}"#)?.field == "olderProtocols.watch")
        #expect(failure(#"{"watch": 4}"#) == nil)
    }

    /// Since protocol 7 the scenario format's README gave `olderProtocols` as
    /// 1…6, and it, the README and `fuzz --help` gave the fuzzer's older
    /// protocols as 1 to 5: each now gives the ranges the code takes and draws.
    @Test func theHelpAndTheDocsGiveThisBuildsProtocolRanges() throws {
        let drawn = "1 to \(Scenario.currentProtocol - 1)"
        let help = FuzzCommand.helpMessage(columns: 10_000)
        #expect(help.contains("an older session protocol (\(drawn))"), "\(help)")
        let repository = URL(fileURLWithPath: SimScenarioTests.fixtures).deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: repository.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains("speaks an older session protocol (\(drawn))"))
        let format = try String(contentsOfFile: SimScenarioTests.fixtures + "/README.md", encoding: .utf8)
        #expect(format.contains("(its highest \(drawn);"))
        #expect(format.contains(#"`{"watch": 4}`, 1…\#(Scenario.currentProtocol) "#))
    }

    /// About 3 in 10 scenarios start a node with an older protocol (from a
    /// stream of their own: the rest of each is the scenario its seed always
    /// gave, but for an `updateApp` step); they run and pass.
    @Test func fuzzGeneratesOlderProtocolsThatConverge() async throws {
        let generator = ScenarioGenerator(ops: 60, appUpdates: false, largeMerges: false)
        let scenarios = (UInt64(1)...40).map(generator.scenario(seed:))
        let older = scenarios.filter { !$0.olderProtocols.isEmpty }
        #expect(older.count >= 6 && older.count <= 20)
        #expect(older.allSatisfy { $0.olderProtocols.count == 1 && $0.olderProtocols.values.allSatisfy { (1..<ReplicationConfiguration().protocolRange.upperBound).contains($0) } })
        #expect(older.contains { s in s.timeline.contains { if case .updateApp = $0.action { true } else { false } } })
        let plain = ScenarioGenerator(ops: 60, appUpdates: false, largeMerges: false, olderProtocols: false).scenario(seed: older[0].seed)
        #expect(plain.olderProtocols.isEmpty)
        #expect(plain.timeline == older[0].timeline.filter { if case .updateApp = $0.action { false } else { true } })
        for scenario in older.prefix(6) {
            #expect(try Scenario.parse(scenario.json) == scenario)
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
        }
    }
}

import Foundation
@_spi(Testing) import SyncEngine
@_spi(Testing) @testable import SyncSim
import Testing

/// `requestManual` steps: a node asks its peers for their manual changes,
/// and the checks count each accepted request as a sync on the node that
/// answered it.
@Suite struct SimManualRequestTests {
    /// Each note is held until a request releases it, then reaches every
    /// node (the phone passes a watch's on to the other watch): three
    /// entries on each. Without the releases each node would hold fewer.
    @Test(arguments: [SimTransport.sim, .tcp])
    func aRequestReleasesThePeersManualChanges(transport: SimTransport) async throws {
        let outcome = await Simulation.run(path: SimScenarioTests.path("manual-request"), transport: transport)
        let report = try #require(outcome.report, "\(outcome.runError ?? "")")
        #expect(report.passed, "\(report.text)")
        #expect(report.nodes.map(\.entries) == [3, 3, 3], "\(report.text)")
        let manual = try #require(report.invariants.first { $0.name == "manual-until-sync" })
        #expect(manual.passed && manual.checks > 0)
    }

    /// Generated scenarios turn some `sync` steps into requests from the
    /// other side, from a stream of their own: otherwise each is the
    /// scenario its seed gave before. Some run, and pass.
    @Test func fuzzGeneratesManualRequests() async throws {
        let generator = ScenarioGenerator(ops: 150)
        let plain = ScenarioGenerator(ops: 150, manualRequests: false)
        var requesting: [Scenario] = []
        for seed in UInt64(1)...40 {
            let scenario = generator.scenario(seed: seed)
            let before = plain.scenario(seed: seed)
            #expect(scenario.timeline.count == before.timeline.count, "seed \(seed)")
            for (step, was) in zip(scenario.timeline, before.timeline) where step != was {
                #expect(step.at == was.at, "seed \(seed)")
                let replacedSync = if case .requestManual = step.action, case .sync = was.action { true } else { false }
                #expect(replacedSync, "seed \(seed): \(step.action) instead of \(was.action)")
            }
            if scenario.timeline.contains(where: { if case .requestManual = $0.action { true } else { false } }) { requesting.append(scenario) }
        }
        #expect(requesting.count >= 10)
        for scenario in requesting.prefix(6) {
            let report = try #require(await Simulation.run(scenario, name: "fuzz-\(scenario.seed)").report)
            #expect(report.passed, "seed \(scenario.seed): \(report.text)")
        }
    }
}

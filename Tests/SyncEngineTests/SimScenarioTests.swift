import Foundation
@_spi(Testing) import SyncEngine
@_spi(Testing) @testable import SyncSim
import Testing

/// The simulator's library API: every fixture passes, runs are reproducible,
/// a deliberate engine fault is caught, bad files are named by field and line.
@Suite struct SimScenarioTests {
    static let fixtures: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/scenarios").path
    }()

    /// The names of the scenario files in `folder` (every one, so that none added is left unrun).
    static func scenarioFiles(in folder: String) -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return files.filter { $0.hasSuffix(".json") }.map { String($0.dropLast(".json".count)) }.sorted()
    }

    static let scenarioNames = scenarioFiles(in: fixtures)

    @Test func everyFixtureFolderIsRead() {
        #expect(Self.scenarioNames.count >= 17 && Self.scenarioNames.contains("basic-two-way") && Self.scenarioNames.contains("older-protocols"))
        #expect(SimRegressionTests.names.count >= 46 && SimRegressionTests.names.contains("one-value-of-a-version-in-flight"))
    }

    static func path(_ name: String) -> String { "\(fixtures)/\(name).json" }

    @Test(arguments: scenarioNames)
    func fixturePassesOverSim(name: String) async throws {
        let outcome = await Simulation.run(path: Self.path(name))
        #expect(outcome.scenarioError == nil, "\(String(describing: outcome.scenarioError))")
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
        #expect(report.converged)
        #expect(outcome.exitCode == 0)
        let scenario = try Scenario.load(path: Self.path(name))
        #expect(!scenario.description.isEmpty)
    }

    @Test func sameSeedGivesIdenticalReports() async throws {
        for name in ["flaky-link", "crash-phone-mid-batch", "conflicts-and-deletes", "two-watches", "power-cut-mid-transaction"] {
            let first = try #require(await Simulation.run(path: Self.path(name)).report)
            let second = try #require(await Simulation.run(path: Self.path(name)).report)
            #expect(first.text == second.text, "\(name)")
            #expect(first.json == second.json, "\(name)")
        }
    }

    @Test func seedOptionOverridesTheScenarioSeed() async throws {
        let report = try #require(await Simulation.run(path: Self.path("flaky-link"), options: RunOptions(seed: 77)).report)
        #expect(report.seed == 77)
        #expect(report.replay.hasSuffix("--seed 77"))
        #expect(report.passed)
    }

    @Test func skippedTombstonesAreCaught() async throws {
        let faults = try Simulation.testingFaults(named: ["skip-tombstones"])
        let outcome = await Simulation.run(path: Self.path("conflicts-and-deletes"), options: RunOptions(testingFaults: faults))
        #expect(outcome.exitCode == Simulation.Exit.invariantFailed)
        let report = try #require(outcome.report)
        #expect(!Set(report.failedInvariants).isDisjoint(with: ["no-resurrection", "convergence"]))
        #expect(report.text.contains("replay: syncsim run"))
        #expect(report.replay.contains("--inject-fault skip-tombstones"))
    }

    @Test func lastArrivalWinsIsCaught() async throws {
        let faults = try Simulation.testingFaults(named: ["last-arrival-wins"])
        let outcome = await Simulation.run(path: Self.path("conflicts-and-deletes"), options: RunOptions(testingFaults: faults))
        #expect(outcome.exitCode == Simulation.Exit.invariantFailed)
    }

    @Test func badScenarioNamesFieldAndLine() async throws {
        let folder = TempFolder()
        let file = folder.file("bad.json")
        try """
        {
          "description": "bad node",
          "seed": 1,
          "keys": [{"name": "a", "availability": "all", "policy": "automaticSmall", "security": "none"}],
          "timeline": [
            {"at": 0, "op": "put", "node": "phone", "key": "a", "value": 1},
            {"at": 5, "op": "put", "node": "tablet", "key": "a", "value": 2}
          ]
        }
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let outcome = await Simulation.run(path: file)
        #expect(outcome.exitCode == Simulation.Exit.badScenario)
        let error = try #require(outcome.scenarioError)
        #expect(error.field == "timeline[1].node")
        #expect(error.line == 7)
        #expect(error.description.contains("bad.json:7"))
    }

    @Test(arguments: [
        ("{\"seed\": 1, \"keys\": [], \"timeline\": []}", "description", 1),
        ("{\"description\": \"d\",\n \"seed\": 1,\n \"keys\": [],\n \"timeline\": [\n {\"at\": 0, \"op\": \"jump\"}]}", "timeline[0].op", 5),
        ("{\"description\": \"d\",\n \"seed\": 1,\n \"keys\": [{\"name\": \"k\",\n \"policy\": \"sometimes\"}],\n \"timeline\": []}", "keys[0].policy", 4),
        ("{\"description\": \"d\",\n \"seed\": 1,\n \"keys\": [],\n \"timeline\": [\n {\"at\": 0, \"op\": \"skew\", \"node\": \"watch\",\n \"ms\": 900000}]}", "timeline[0].ms", 6),
        ("{\"description\": \"d\",\n \"seed\": 1,\n \"keys\": [],\n \"faults\": {\"lossRate\": 2}, \"timeline\": []}", "faults.lossRate", 4),
        ("{\"description\": \"d\",\n \"seed\": 1,\n \"keys\": [\n oops]}", "", 4),
    ])
    func badScenarioTexts(text: String, field: String, line: Int) {
        #expect(throws: ScenarioError.self) { try Scenario.parse(text, file: "t.json") }
        do {
            _ = try Scenario.parse(text, file: "t.json")
        } catch {
            #expect(error.field == field)
            #expect(error.line == line)
        }
    }

    @Test func scenarioJSONRoundTrips() async throws {
        let scenario = ScenarioGenerator(ops: 60).scenario(seed: 42)
        let parsed = try Scenario.parse(scenario.json)
        #expect(parsed.keys == scenario.keys)
        #expect(parsed.faults == scenario.faults)
        #expect(parsed.timeline.map(\.action) == scenario.timeline.map(\.action))
        #expect(parsed.timeline.map(\.at) == scenario.timeline.map(\.at))
    }

    @Test func generatedValuesHaveTheExactSerializedSize() async throws {
        let scenario = try Scenario.parse("""
        {"description": "sizes", "seed": 3,
         "keys": [{"name": "j", "policy": "manual"}, {"name": "d", "policy": "manual", "encoding": "data"}],
         "timeline": [{"at": 0, "op": "put", "node": "phone", "key": "j", "size": 102401},
                      {"at": 0, "op": "put", "node": "phone", "key": "d", "size": 7}]}
        """)
        let runner = try ScenarioRunner<SimulatedScenarioLink>(scenario: scenario)
        #expect(runner.valueBytes(descriptor: scenario.keys[0], value: nil, size: 102_401).count == 102_401)
        #expect(runner.valueBytes(descriptor: scenario.keys[1], value: nil, size: 7).count == 7)
    }
}

/// The same fixtures over real sockets on 127.0.0.1.
@Suite struct SimTCPScenarioTests {
    @Test(arguments: SimScenarioTests.scenarioNames)
    func fixturePassesOverTCP(name: String) async throws {
        let outcome = await Simulation.runTCP(path: SimScenarioTests.path(name))
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
        #expect(report.transport == "tcp")
    }

    /// A watch replaced while the phone is down (its power cut) leaves the
    /// phone down until its `restart`; the TCP link reopened it at once, on
    /// dead files, and the run stopped with "unable to open database file".
    @Test func aWatchReplacedWhileThePhoneIsDownLeavesItDownOverTCP() async throws {
        let outcome = await Simulation.runTCP(path: "\(SimScenarioTests.fixtures)/regressions/older-app-entry-refused-by-name.json")
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
    }

    /// A watch's queued change the phone merged while their live session ran
    /// reaches the watch over it (TCP only: the simulated runner pumps every endpoint).
    @Test func aQueuedMergeGoesOverTheLiveSessionOverTCP() async throws {
        let outcome = await Simulation.runTCP(path: "\(SimScenarioTests.fixtures)/regressions/queued-merge-during-live-session.json")
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
    }

    /// A watch refused for its node id in a queued round (`node-id-conflict`)
    /// took a new one while its live session, whose hello named the old one,
    /// went on: the phone never met it under the new id and the run never settled.
    @Test func aWatchRenewedInAQueuedRoundConnectsUnderItsNewNodeIDOverTCP() async throws {
        let outcome = await Simulation.runTCP(path: "\(SimScenarioTests.fixtures)/regressions/queued-renewal-during-live-session.json")
        #expect(outcome.runError == nil, "\(outcome.runError ?? "")")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
    }

    @Test func skippedTombstonesAreCaughtOverTCP() async throws {
        let faults = try Simulation.testingFaults(named: ["skip-tombstones"])
        let outcome = await Simulation.runTCP(path: SimScenarioTests.path("conflicts-and-deletes"), options: RunOptions(testingFaults: faults))
        #expect(outcome.exitCode == Simulation.Exit.invariantFailed)
    }
}

/// Engine (and checker) bugs the fuzzer found, fixed, and kept as regression scenarios.
@Suite struct SimRegressionTests {
    /// Every file of `regressions/`.
    static let names = SimScenarioTests.scenarioFiles(in: SimScenarioTests.fixtures + "/regressions")

    @Test(arguments: names)
    func fixedEngineBugStaysFixed(name: String) async throws {
        let outcome = await Simulation.run(path: "\(SimScenarioTests.fixtures)/regressions/\(name).json")
        let report = try #require(outcome.report)
        #expect(report.passed, "\(report.text)")
    }
}

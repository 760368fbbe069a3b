import Foundation
import SyncEngine

/// The library entry points behind `syncsim run`, usable from tests without
/// spawning the binary.
public enum Simulation {
    /// Exit codes of `syncsim run` and `syncsim fuzz`.
    public enum Exit {
        public static let passed: Int32 = 0
        public static let invariantFailed: Int32 = 1
        public static let badScenario: Int32 = 2
    }

    /// What a run produced: the report, or why the scenario could not run.
    public struct Outcome: Sendable {
        public var report: SimReport?
        public var scenarioError: ScenarioError?
        /// A failure of the simulator itself (not an invariant), e.g. a store that would not open.
        public var runError: String?
        public var exitCode: Int32
    }

    /// Named deliberate engine faults for `--inject-fault`.
    public static func testingFaults(named names: [String]) throws(ScenarioError) -> TestingFaults {
        var faults = TestingFaults()
        for name in names {
            switch name {
            case "skip-tombstones": faults.skipTombstones = true
            case "last-arrival-wins": faults.lastArrivalWins = true
            default: throw ScenarioError(file: "--inject-fault", field: "", line: 0, message: "unknown fault '\(name)'; use skip-tombstones or last-arrival-wins")
            }
        }
        return faults
    }

    /// Loads and runs a scenario file over the simulated transport.
    public static func run(path: String, options: RunOptions = RunOptions()) -> Outcome {
        let scenario: Scenario
        do {
            scenario = try Scenario.load(path: path)
        } catch {
            return Outcome(report: nil, scenarioError: error, runError: nil, exitCode: Exit.badScenario)
        }
        return run(scenario, name: path, options: options)
    }

    /// Loads and runs a scenario file over real TCP sockets on 127.0.0.1 (faults approximated).
    public static func runTCP(path: String, options: RunOptions = RunOptions()) async -> Outcome {
        let scenario: Scenario
        do {
            scenario = try Scenario.load(path: path)
        } catch {
            return Outcome(report: nil, scenarioError: error, runError: nil, exitCode: Exit.badScenario)
        }
        do {
            let runner = try TCPRunner(scenario: scenario, options: options)
            let report = try await runner.run(scenarioName: path)
            return Outcome(report: report, scenarioError: nil, runError: nil, exitCode: report.passed ? Exit.passed : Exit.invariantFailed)
        } catch {
            return Outcome(report: nil, scenarioError: nil, runError: "the simulator could not run the scenario over tcp: \(error.message)",
                           exitCode: Exit.invariantFailed)
        }
    }

    /// Runs a parsed scenario over the simulated transport; `name` is used in the replay command.
    public static func run(_ scenario: Scenario, name: String, options: RunOptions = RunOptions()) -> Outcome {
        do {
            let runner = try SimRunner(scenario: scenario, options: options)
            let report = try runner.run(scenarioName: name)
            return Outcome(report: report, scenarioError: nil, runError: nil, exitCode: report.passed ? Exit.passed : Exit.invariantFailed)
        } catch {
            return Outcome(report: nil, scenarioError: nil, runError: "the simulator could not run the scenario: \(error.message)",
                           exitCode: Exit.invariantFailed)
        }
    }
}

import ArgumentParser
import Foundation
@_spi(Testing) import SyncEngine

/// The library entry points behind `syncsim run`, usable from tests without
/// spawning the binary.
public enum Simulation {
    /// Exit codes of `syncsim` (the README's table).
    public enum Exit {
        public static let passed: Int32 = 0
        /// `run`, `fuzz`: an invariant failed.
        public static let invariantFailed: Int32 = 1
        /// `run`: the scenario file is bad.
        public static let badScenario: Int32 = 2
        /// A file the command was given cannot be used (scenario, key registry,
        /// secret, store or key file); the same code as `badScenario`.
        public static let badInput: Int32 = 2
        /// The command failed at run time (the simulator could not run the
        /// scenario, a file could not be written, a port could not be bound).
        public static let runtimeFailure: Int32 = 3
        /// Bad or missing options: the only failure that prints the usage
        /// (ArgumentParser's `EX_USAGE`).
        public static let usage: Int32 = 64
    }

    /// What a run produced: the report, or why the scenario could not run.
    public struct Outcome: Sendable {
        public var report: SimReport?
        public var scenarioError: ScenarioError?
        /// A failure of the simulator itself (not an invariant), e.g. a store that would not open.
        public var runError: String?
        public var exitCode: Int32
    }

    /// The names `--inject-fault` takes, in the order its error lists them.
    static let knownFaults = ["skip-tombstones", "last-arrival-wins", "ignore-key-mismatch", "remove-rebaselined-at-once"]

    /// Named deliberate engine faults for `--inject-fault`. An unknown name is
    /// a usage error of `run` and `fuzz` alike (exit 64): `options(seed:injecting:)`.
    @_spi(Testing) public static func testingFaults(named names: [String]) throws(ScenarioError) -> TestingFaults {
        var faults = TestingFaults()
        for name in names {
            switch name {
            case "skip-tombstones": faults.skipTombstones = true
            case "last-arrival-wins": faults.lastArrivalWins = true
            case "ignore-key-mismatch": faults.ignoreKeyMismatch = true
            case "remove-rebaselined-at-once": faults.removeRebaselinedAtOnce = true
            default: throw ScenarioError(file: "--inject-fault", field: "", line: 0,
                                         message: "unknown fault '\(name)'; the known faults are \(knownFaults.joined(separator: ", "))")
            }
        }
        return faults
    }

    /// Run options with the faults `--inject-fault` names; a name none of
    /// `knownFaults` is a usage error, listing them.
    static func options(seed: UInt64? = nil, injecting names: [String]) throws(ValidationError) -> RunOptions {
        do {
            return RunOptions(seed: seed, testingFaults: try testingFaults(named: names))
        } catch {
            throw ValidationError("--inject-fault: \(error.message)")
        }
    }

    /// How many runs this process runs at once on each transport (twice the
    /// cores, 4 to 16); the others wait for a slot.
    public static var concurrentRunLimit: Int { RunSlots.defaultWidth }

    /// Loads and runs a scenario file over `transport` (the simulated link by default).
    public static func run(path: String, options: RunOptions = RunOptions(), transport: SimTransport = .sim) async -> Outcome {
        let scenario: Scenario
        do {
            scenario = try Scenario.load(path: path)
        } catch {
            return Outcome(report: nil, scenarioError: error, runError: nil, exitCode: Exit.badScenario)
        }
        return await run(scenario, name: path, options: options, transport: transport)
    }

    /// Loads and runs a scenario file over real TCP sockets on 127.0.0.1 (faults approximated).
    public static func runTCP(path: String, options: RunOptions = RunOptions()) async -> Outcome {
        await run(path: path, options: options, transport: .tcp)
    }

    /// Runs a parsed scenario; `name` is used in the replay command.
    ///
    /// Runs in one process share a bound: at most `concurrentRunLimit` at once
    /// on each transport; a run started beyond it waits for one to end (a test
    /// suite that starts every scenario at once does not run out of file
    /// descriptors). A run in virtual time gives the same report whenever it starts.
    public static func run(_ scenario: Scenario, name: String, options: RunOptions = RunOptions(), transport: SimTransport = .sim) async -> Outcome {
        do {
            let report = switch transport {
            case .sim:
                try await RunSlots.simulated.withSlot {
                    try await ScenarioRunner<SimulatedScenarioLink>(scenario: scenario, options: options).run(scenarioName: name)
                }
            case .tcp:
                try await RunSlots.overTCP.withSlot {
                    try await ScenarioRunner<TCPScenarioLink>(scenario: scenario, options: options).run(scenarioName: name)
                }
            }
            return Outcome(report: report, scenarioError: nil, runError: nil, exitCode: report.passed ? Exit.passed : Exit.invariantFailed)
        } catch {
            let over = transport == .sim ? "" : " over \(transport.rawValue)"
            return Outcome(report: nil, scenarioError: nil, runError: "the simulator could not run the scenario\(over): \(error.message)",
                           exitCode: Exit.runtimeFailure)
        }
    }
}

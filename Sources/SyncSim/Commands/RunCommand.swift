import ArgumentParser
import Foundation

/// `syncsim run SCENARIO.json [--seed N] [--transport sim|tcp] [--json]`.
public struct RunCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a scenario, check the invariants, print a report.",
        discussion: "Exit status: 0 when every invariant holds, 1 when one fails (the report prints the replay command), 2 for a bad scenario file, 3 when the simulator could not run it.")

    public typealias Transport = SimTransport

    @Argument(help: "The scenario file (see Fixtures/scenarios/README.md).")
    var scenario: String

    /// `.unconditional`: `--seed -1` is an invalid value, not a missing one (-1 taken for an option).
    @Option(parsing: .unconditional, help: "Override the scenario's seed (0 to Int64.max).")
    var seed: UInt64?

    @Option(help: "sim (virtual time, default) or tcp (real sockets on 127.0.0.1).")
    var transport: Transport = .sim

    @Flag(help: "Print the report as JSON.")
    var json = false

    @Option(help: "Copy the nodes' store files to this folder at the end, for `syncsim inspect`.")
    var keepStores: String?

    @Option(name: .customLong("inject-fault"), help: .hidden)
    var injectFault: [String] = []

    public init() {}

    /// A seed past Int64.max is a usage error, as a scenario file's `seed` is;
    /// so is an unknown `--inject-fault` (exit 64, as in `fuzz`).
    public func validate() throws {
        if let seed, seed > UInt64(Int64.max) {
            throw ValidationError("--seed must be at most \(Int64.max), as a scenario file's seed")
        }
        _ = try Simulation.options(injecting: injectFault)
    }

    public func run() async throws {
        var faults = try Simulation.options(seed: seed, injecting: injectFault)
        faults.keepStoresIn = keepStores
        let outcome = await Simulation.run(path: scenario, options: faults, transport: transport)
        // Failures print as every command's do: one line, `syncsim run: error: …`.
        if let error = outcome.scenarioError {
            throw CommandFailure(exitCode: outcome.exitCode, "bad scenario: \(error)")
        } else if let error = outcome.runError {
            throw CommandFailure(exitCode: outcome.exitCode, error)
        } else if let report = outcome.report {
            print(json ? report.json : report.text, terminator: "")
        }
        if outcome.exitCode != 0 { throw ExitCode(outcome.exitCode) }
    }
}

func printError(_ message: String) {
    try? FileHandle.standardError.write(contentsOf: Data((message + "\n").utf8))
}

extension SimTransport: ExpressibleByArgument {}

import ArgumentParser
@testable import SyncSim
import Testing

/// `syncsim fuzz --runs -1` said "Missing value for '--runs <runs>'": the
/// parser took `-1` for an option, so a script that computed a negative
/// count was told it gave none. A number after a numeric option is its
/// value now, and the error says what is wrong with it (still a usage error).
@Suite struct NegativeOptionValueTests {
    static let scenario = "Fixtures/scenarios/basic-two-way.json"

    static func message<C: ParsableCommand>(_ command: C.Type, _ arguments: [String]) -> String? {
        do {
            _ = try command.parse(arguments)
            return nil
        } catch {
            #expect(command.exitCode(for: error).rawValue == Simulation.Exit.usage, "\(arguments)")
            return command.message(for: error)
        }
    }

    @Test(arguments: [
        (["--runs", "-1"], "--runs must be at least 1"),
        (["--ops", "-5"], "--ops must be in 1...10000"),
        (["--watches", "-2"], "--watches must be in 1...3"),
        (["--seed", "-1"], "The value '-1' is invalid for '--seed <seed>'"),
    ])
    func fuzz(arguments: [String], expected: String) {
        let message = Self.message(FuzzCommand.self, arguments)
        #expect(message?.contains(expected) == true, "\(arguments): \(message ?? "accepted")")
    }

    @Test func runAndBench() {
        let run = Self.message(RunCommand.self, [Self.scenario, "--seed", "-3"])
        #expect(run?.contains("The value '-3' is invalid for '--seed <seed>'") == true, "\(run ?? "accepted")")
        let runs = Self.message(BenchCommand.self, ["store", "--runs", "-1"])
        #expect(runs?.contains("--runs must be at least 1, not -1") == true, "\(runs ?? "accepted")")
        let samples = Self.message(BenchCommand.self, ["sync", "--latency-samples", "-10"])
        #expect(samples?.contains("--latency-samples must be 10...1000000, not -10") == true, "\(samples ?? "accepted")")
    }

    /// `fuzz --runs 9223372036854775807` without `--seed` said "--seed must
    /// be at most 0 (Int64.max less --runs)": the user gave no seed, the
    /// runs were too many. The message names `--runs` first then (still a
    /// usage error); with `--seed` given, it names the seed as before.
    @Test func tooManyRunsWithoutASeedNamesTheRuns() throws {
        let folder = TempFolder()
        let message = Self.message(FuzzCommand.self, ["--runs", "\(Int64.max)", "--out-dir", folder.path])
        #expect(message?.contains("--runs \(Int64.max) leaves no seed") == true, "\(message ?? "accepted")")
        #expect(message?.contains("--seed + --runs must stay within Int64.max") == true, "\(message ?? "accepted")")
        #expect(message?.contains("--seed must be at most") == false, "\(message ?? "accepted")")
        _ = try FuzzCommand.parse(["--runs", "\(Int64.max - 1)", "--out-dir", folder.path])
        let seeded = Self.message(FuzzCommand.self, ["--runs", "\(Int64.max)", "--seed", "1", "--out-dir", folder.path])
        #expect(seeded?.contains("--seed must be at most 0") == true, "\(seeded ?? "accepted")")
        _ = try FuzzCommand.parse(["--runs", "\(Int64.max - 1)", "--seed", "1", "--out-dir", folder.path])
    }
}

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
    /// be at most 0 (Int64.max less --runs)": the user gave no seed. Those
    /// runs fit the default seed 1 (seeds 1...Int64.max) and are taken now;
    /// one run more than a given seed leaves is refused, naming the seed.
    @Test func tooManyRunsWithoutASeedNamesTheRuns() throws {
        let folder = TempFolder()
        _ = try FuzzCommand.parse(["--runs", "\(Int64.max)", "--out-dir", folder.path])
        _ = try FuzzCommand.parse(["--runs", "\(Int64.max)", "--seed", "1", "--out-dir", folder.path])
        let seeded = Self.message(FuzzCommand.self, ["--runs", "\(Int64.max)", "--seed", "2", "--out-dir", folder.path])
        #expect(seeded?.contains("--seed must be at most 1 with --runs \(Int64.max)") == true, "\(seeded ?? "accepted")")
    }

    /// `fuzz --seed 9223372036854775807 --runs 1` was refused ("--seed must
    /// be at most 9223372036854775806"), though its one seed is Int64.max: the
    /// bound took seed + runs, not the last seed, seed + runs - 1. Ranges that
    /// pass Int64.max (or a seed past it) are still refused, without overflow.
    @Test func theLastSeedMayBeInt64Max() throws {
        let folder = TempFolder()
        let top = "\(Int64.max)"
        _ = try FuzzCommand.parse(["--seed", top, "--runs", "1", "--out-dir", folder.path])
        _ = try FuzzCommand.parse(["--seed", "\(Int64.max - 9)", "--runs", "10", "--out-dir", folder.path])
        let past = Self.message(FuzzCommand.self, ["--seed", top, "--runs", "2", "--out-dir", folder.path])
        #expect(past?.contains("--seed must be at most \(Int64.max - 1) with --runs 2") == true, "\(past ?? "accepted")")
        #expect(past?.contains("--seed + --runs - 1") == true, "\(past ?? "accepted")")
        let tenPast = Self.message(FuzzCommand.self, ["--seed", "\(Int64.max - 8)", "--runs", "10", "--out-dir", folder.path])
        #expect(tenPast != nil, "a range past Int64.max was accepted")
        for seed in ["\(UInt64(Int64.max) + 1)", "\(UInt64.max)"] {
            let beyond = Self.message(FuzzCommand.self, ["--seed", seed, "--runs", "1", "--out-dir", folder.path])
            #expect(beyond?.contains("--seed must be at most \(Int64.max) with --runs 1") == true, "\(beyond ?? "accepted")")
        }
        let most = Self.message(FuzzCommand.self, ["--seed", "\(UInt64.max)", "--runs", "\(Int64.max)", "--out-dir", folder.path])
        #expect(most?.contains("--seed must be at most 1") == true, "\(most ?? "accepted")")
    }
}

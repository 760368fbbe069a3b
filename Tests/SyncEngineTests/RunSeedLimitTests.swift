import ArgumentParser
import Foundation
@testable import SyncSim
import Testing

/// `syncsim run --seed` took seeds past Int64.max, which a scenario file's
/// `seed` refuses (so such a run's replay file could not be read back). A
/// usage error now, as `fuzz --seed` past its limit is.
@Suite struct RunSeedLimitTests {
    @Test func aSeedPastInt64MaxIsAUsageError() throws {
        for seed in ["\(UInt64(Int64.max) + 1)", "\(UInt64.max)"] {
            do {
                _ = try RunCommand.parse(["s.json", "--seed", seed])
                Issue.record("--seed \(seed) was accepted")
            } catch {
                #expect(RunCommand.exitCode(for: error) == FuzzCommand.exitCode(for: ValidationError("")), "\(seed)")
                #expect(RunCommand.message(for: error).contains("\(Int64.max)"), "\(RunCommand.message(for: error))")
            }
        }
        _ = try RunCommand.parse(["s.json", "--seed", "\(Int64.max)"])
        _ = try RunCommand.parse(["s.json", "--seed", "0"])
    }
}

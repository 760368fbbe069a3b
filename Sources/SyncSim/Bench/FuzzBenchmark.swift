import Foundation

/// `syncsim fuzz` throughput inside `syncsim bench`: random scenarios of 100
/// operations through the deterministic simulator, with every invariant checked.
public struct FuzzBenchmark: Sendable {
    public let runs: Int
    public let ops = 100

    public init(quick: Bool) { runs = quick ? 10 : 500 }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        progress("fuzz: \(runs) scenarios of \(ops) operations")
        let outDir = NSTemporaryDirectory() + "syncsim-bench-fuzz-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: outDir) }
        var fuzzer = Fuzzer(runs: runs, seed: 1, ops: ops, options: RunOptions())
        fuzzer.outDir = outDir
        let start = ContinuousClock.now
        let bar = ProgressBar()
        let (completed, failure) = await fuzzer.run { done, total in bar.show(done, total, since: start) }
        bar.finish()
        let seconds = max(0.001, (ContinuousClock.now - start) / .seconds(1))
        if let failure {
            throw BenchError("fuzz scenario with seed \(failure.seed) failed (\(failure.failedInvariants.joined(separator: ", "))); run `syncsim fuzz --seed \(failure.seed) --runs 1 --ops \(ops)` to see it")
        }
        let cores = ProcessInfo.processInfo.activeProcessorCount
        return [BenchFigure(name: "fuzz scenarios/s (\(ops) ops, \(cores) cores)", value: Double(completed) / seconds,
                            unit: "scenarios/s", target: "≥ 50 on 2 cores")]
    }
}

import SyncSim
import Testing

/// The benchmarks' `--quick` smoke run: they work end to end. No timing assertions.
@Suite struct BenchSmokeTests {
    @Test func storeBenchmarkQuickRun() throws {
        let figures = try StoreBenchmark(quick: true).run()
        #expect(figures.count == 4)
        #expect(figures.allSatisfy { $0.value > 0 })
    }

    @Test func syncBenchmarkQuickRun() async throws {
        let figures = try await SyncBenchmark(quick: true).run()
        #expect(figures.contains { $0.name.hasPrefix("initial sync in memory") && $0.value > 0 })
    }

    @Test func fuzzBenchmarkQuickRunChecksEveryScenario() async throws {
        let figures = try await FuzzBenchmark(quick: true).run()
        #expect(figures.count == 1)
        #expect(figures[0].name.hasPrefix("fuzz scenarios/s") && figures[0].unit == "scenarios/s" && figures[0].value > 0)
    }
}

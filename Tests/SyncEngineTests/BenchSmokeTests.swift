import Foundation
import SyncSim
import Testing

/// The benchmarks' `--quick` smoke run: they work end to end. No timing assertions.
@Suite struct BenchSmokeTests {
    @Test func storeBenchmarkQuickRun() throws {
        let figures = try StoreBenchmark(quick: true).run()
        #expect(figures.count == 14)
        #expect(figures.allSatisfy { $0.value > 0 })
        // The typed writes are the fastest of three runs, as their raw baselines are: never slower than the first run.
        let typed = try #require(figures.first { $0.name.hasPrefix("batched typed writes/s (") })
        let first = try #require(figures.first { $0.name.hasPrefix("batched typed writes/s, the first of the 3 runs") })
        #expect(typed.value >= first.value && typed.baseline == first.baseline)
        // The figures that bound the typed writes are there, measured against the same raw insert.
        let layout = try #require(figures.first { $0.name.hasPrefix("raw SQLite insert into the store's table layout") })
        let collecting = try #require(figures.first { $0.name.hasPrefix("collecting") })
        #expect(layout.baseline == collecting.baseline && (layout.baseline ?? 0) > 0)
        // The single write and a remote entry applied alone, each against a raw one-row commit of the same run.
        let raw50 = try #require(figures.first { $0.name.hasPrefix("raw one-row SQLite commit p50") })
        let raw99 = try #require(figures.first { $0.name.hasPrefix("raw one-row SQLite commit p99") })
        #expect(raw50.value <= raw99.value)
        for name in ["one committed write", "one remote entry applied"] {
            for (percentile, raw) in [("p50", raw50), ("p99", raw99)] {
                let figure = try #require(figures.first { $0.name.hasPrefix(name) && $0.name.contains("\(percentile) ÷ raw commit") }, "\(name) \(percentile)")
                #expect(figure.baseline == raw.value)
                #expect(abs((figure.ratio ?? 0) - figure.value / raw.value) < 1e-9)
            }
        }
    }

    @Test func syncBenchmarkQuickRun() async throws {
        let figures = try await SyncBenchmark(quick: true).run()
        func figure(_ prefix: String) throws -> BenchFigure { try #require(figures.first { $0.name.hasPrefix(prefix) }, "\(prefix)") }
        #expect(try figure("initial sync in memory").value > 0)
        #expect(try figure("initial sync over TCP").value > 0)
        #expect(try figure("incremental sync over TCP").value > 0)
        let time = try figure("initial sync over TCP, time")
        #expect(time.value > 0 && (time.baseline ?? 0) > 0)
        #expect(try figure("initial sync over TCP, time ÷ raw insert time").value > 0)
        // Byte accounting, not timing: each byte on the socket is counted once, so the
        // wire (compressed JSON) is well under the raw bytes and near one zlib deflate of them
        // (a reconnect on a loaded machine legitimately sends the batch in flight again).
        let sessions = try figure("TCP sessions for the initial sync").value
        #expect(sessions >= 1)
        let wireToRaw = try figure("TCP wire bytes ÷ raw key+value bytes").value
        #expect(wireToRaw > 0.05 && wireToRaw < 0.5 * sessions)
        let wireToZlib = try figure("TCP wire bytes ÷ zlib-6(raw key+value), initial").value
        #expect(wireToZlib > 0.8 && wireToZlib < 2 * sessions)
        #expect(try figure("TCP wire bytes ÷ zlib-6(raw key+value), incremental").value > 0.8)
        // The floor under write→visible is measured in the same run, and the samples are reported against it.
        let floor50 = try figure("write→visible floor p50"), floor99 = try figure("write→visible floor p99")
        #expect(floor50.value > 0 && floor99.value >= floor50.value)
        let overFloor = try figure("write→visible p99 ÷ its floor's p99")
        #expect(overFloor.baseline == floor99.value)
        #expect(abs(overFloor.value * floor99.value - (try figure("write→visible p99 (TCP, idle link)").value)) < 1e-6 * overFloor.value * floor99.value)
        // The CPU both peers spend per write→visible sample, against the samples' p50; and the threads' switches per sample.
        let cpu = try figure("write→visible CPU per write, both peers"), p50 = try figure("write→visible p50 (TCP, idle link)")
        #expect(cpu.value > 0 && cpu.baseline == p50.value)
        #expect(abs((cpu.ratio ?? 0) - cpu.value / p50.value) < 1e-9 * cpu.value / p50.value)
        #expect(try figure("write→visible context switches per write, both peers").value > 0)
        // The app's own write, timed apart from its way to the peer: never longer than the whole.
        let write50 = try figure("the app's write (setNow) during write→visible, p50")
        let write999 = try figure("the app's write (setNow) during write→visible, p99.9")
        let writeMax = try figure("the app's write (setNow) during write→visible, max")
        #expect(write50.value > 0 && write50.value <= write999.value && write999.value <= writeMax.value)
        #expect(writeMax.value <= (try figure("write→visible max").value))
    }

    /// `--latency-samples` sets how many writes the write→visible phase times,
    /// within bounds (a run of 5 has no p99).
    @Test func latencySamplesOptionIsBounded() async throws {
        var sync = SyncBenchmark(quick: true)
        #expect(sync.latencySamples == 50)
        sync.latencySamples = 20
        let figures = try await sync.run()
        #expect(figures.contains { $0.name == "the app's write (setNow) during write→visible, max" && $0.value > 0 })
        let process = Process()
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["bench", "sync", "--quick", "--latency-samples", "5"]
        let stderr = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        #expect(try await exitStatus(of: process, "syncsim bench sync --latency-samples 5 to exit") != 0)
        let message = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("--latency-samples must be 10...1000000, not 5"), "\(message)")
    }

    /// Values over the automatic limit take the chunked path (manual, released
    /// by `sync()`): the memory benchmark's second half syncs every one of them.
    @Test func memoryBenchmarkSyncsChunkedValues() async throws {
        let figures = try await MemoryBenchmark(count: 12, size: 1 << 20).run()
        let received = try #require(figures.first { $0.name.hasPrefix("entries received by the watch (1 MB values)") })
        #expect(received.value == 12)
        #expect(try #require(figures.first { $0.name.hasPrefix("peak resident memory during the sync (1 MB values)") }).value > 0)
    }

    /// `syncsim bench memory` runs each value size in a process of its own
    /// (`--memory-values`), so the 1 MB figures do not carry the heap the
    /// allocator kept from the 100 KB gigabyte; the parent prints both.
    @Test func memoryBenchmarkRunsEachValueSizeInItsOwnProcess() async throws {
        func figures(_ arguments: [String]) async throws -> [BenchFigure] {
            try await benchFigures(["memory", "--quick", "--json"] + arguments)
        }
        let child = try await figures(["--memory-values", "1m"])
        #expect(child.map(\.name).allSatisfy { $0.contains("1 MB") }, "\(child.map(\.name))")
        #expect(child.first { $0.name.hasPrefix("entries received by the watch") }?.value == 20)
        let both = try await figures([])
        #expect(both.count == 8)
        #expect(both.first { $0.name == "entries received by the watch (100 KB values)" }?.value == 200)
        #expect(both.first { $0.name == "entries received by the watch (1 MB values)" }?.value == 20)
    }

    /// `--runs N` prints each figure's median over the runs: value, baseline
    /// and ratio each their own median (a ratio stays one taken within a run).
    @Test func mediansOfRunsTakeEachPartOnItsOwn() {
        let runs: [[BenchFigure]] = [
            [BenchFigure(name: "a", value: 3, unit: "×", baseline: 10, baselineName: "raw", ratio: 0.3, target: "≤ 2"),
             BenchFigure(name: "b", value: 1, unit: "µs")],
            [BenchFigure(name: "a", value: 1, unit: "×", baseline: 30, baselineName: "raw", ratio: 0.9, target: "≤ 2")],
            [BenchFigure(name: "a", value: 2, unit: "×", baseline: 20, baselineName: "raw", ratio: 0.1, target: "≤ 2"),
             BenchFigure(name: "b", value: 4, unit: "µs")],
        ]
        #expect(BenchFigure.medians(of: runs) == [
            BenchFigure(name: "a", value: 2, unit: "×", baseline: 20, baselineName: "raw", ratio: 0.3, target: "≤ 2"),
            BenchFigure(name: "b", value: 2.5, unit: "µs"),
        ])
        #expect(BenchFigure.medians(of: [runs[0]]) == runs[0])
    }

    /// `syncsim bench fuzz --quick --runs 2 --json`: one row, the median of two runs.
    @Test func runsOptionPrintsOneMedianRowPerFigure() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["bench", "fuzz", "--quick", "--runs", "2", "--json"]
        let stdout = Pipe(), stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let data = try await output(of: stdout, "syncsim bench fuzz --runs 2's output")
        #expect(try await exitStatus(of: process, "syncsim bench fuzz --runs 2 to exit") == 0)
        let figures = try JSONDecoder().decode([BenchFigure].self, from: data)
        #expect(figures.count == 1 && figures[0].name.hasPrefix("fuzz scenarios/s") && figures[0].value > 0)
        let progress = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(progress.contains("run 2 of 2") && progress.contains("median of 2 runs"), "\(progress)")
    }

    @Test func fuzzBenchmarkQuickRunChecksEveryScenario() async throws {
        let figures = try await FuzzBenchmark(quick: true).run()
        #expect(figures.count == 1)
        #expect(figures[0].name.hasPrefix("fuzz scenarios/s") && figures[0].unit == "scenarios/s" && figures[0].value > 0)
    }

    /// `syncsim bench fuzz --quick --json` prints the fuzz row as JSON on stdout (progress goes to stderr).
    @Test func fuzzRowInQuickJSONOutput() async throws {
        let figures = try await benchFigures(["fuzz", "--quick", "--json"])
        let fuzz = try #require(figures.first { $0.name.hasPrefix("fuzz scenarios/s") })
        #expect(fuzz.unit == "scenarios/s" && fuzz.value > 0)
    }
}

/// Round two's benchmarks, `--quick`: they run end to end. Byte counts only, no timing.
@Suite struct RoundTwoBenchSmokeTests {
    @Test func burstBenchmarkQuickRun() async throws {
        let figures = try await BurstBenchmark(quick: true).run()
        let burst = try #require(figures.first { $0.name.hasPrefix("burst of 100 single-key commits") })
        #expect(burst.value > 0 && (burst.baseline ?? 0) > 0)
        #expect(try #require(figures.first { $0.name.hasPrefix("write→visible p99 (TCP") }).value > 0)
    }

    @Test func frameRoundTripBenchmarkQuickRun() async throws {
        let figures = try await FrameRoundTripBenchmark(quick: true).run()
        let raw = try #require(figures.first { $0.name.hasPrefix("raw loopback round trip p50") })
        let p50 = try #require(figures.first { $0.name.hasPrefix("frame round trip p50") })
        let p99 = try #require(figures.first { $0.name.hasPrefix("frame round trip p99") })
        #expect(raw.value > 0 && p50.value > 0 && p50.value <= p99.value)
        for figure in [p50, p99] {
            #expect(figure.baseline == raw.value)
            #expect(abs((figure.ratio ?? 0) - figure.value / raw.value) < 1e-9)
        }
    }

    @Test func readDuringSyncBenchmarkQuickRun() async throws {
        let figures = try await ReadDuringSyncBenchmark(quick: true).run()
        let during = try #require(figures.first { $0.name.hasPrefix("cache-miss read p99 during initial sync") })
        #expect(during.value > 0 && (during.baseline ?? 0) > 0)
    }

    /// Counts, not timing: over the same span at rest, the sessions whose ticks grow apart
    /// handle fewer inputs than those ticking every 200 ms (about 1 against 10 a second,
    /// measured over 2 s after 2 s at rest; the quick run measured the first second at rest,
    /// about 5 against 10, and a loaded machine once starved both to 1.5).
    /// In a process of its own: in the test process the other tests' work
    /// holds the cooperative pool's threads, and the 200 ms ticks came 1.7
    /// times a second, counted with what the quiet pair caught up on (1.8).
    @Test func idleBenchmarkQuickRun() async throws {
        let figures = try await benchFigures(["idle", "--quick", "--json"])
        let wakeups = try #require(figures.first { $0.name.hasPrefix("session-loop wake-ups at rest") })
        #expect(wakeups.value < (wakeups.baseline ?? 0))
        #expect(try #require(figures.first { $0.name.hasPrefix("CPU at rest") }).baseline ?? 0 > 0)
    }
}

/// What `syncsim bench ARGUMENTS` (with `--json`) prints on stdout, decoded; it must exit 0.
func benchFigures(_ arguments: [String]) async throws -> [BenchFigure] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: syncsimBinary())
    process.arguments = ["bench"] + arguments
    let stdout = Pipe()
    process.standardOutput = stdout
    process.standardError = FileHandle.nullDevice
    try process.run()
    defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
    let what = "syncsim bench \(arguments.joined(separator: " "))"
    let data = try await output(of: stdout, "\(what)'s output")
    #expect(try await exitStatus(of: process, "\(what) to exit") == 0)
    return try JSONDecoder().decode([BenchFigure].self, from: data)
}

/// `syncsim bench reconnect --quick` in a process of its own (the heap is the
/// process's): a phone keeps next to nothing of each watch session that ended.
/// Before `serve` discarded its ended sessions, it kept about 17 KB of each.
@Suite struct ReconnectBenchmarkSmokeTests {
    @Test func endedSessionsLeaveNextToNothingOnTheHeap() async throws {
        let figures = try await benchFigures(["reconnect", "--quick", "--json"])
        let kept = try #require(figures.first { $0.name.hasPrefix("heap kept per watch session that ended") })
        #expect(kept.value < 4_096, "\(kept.value) bytes per session")
        #expect(kept.baseline != nil)
    }
}

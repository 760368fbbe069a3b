import ArgumentParser
import Foundation

/// `syncsim bench [store|sync|burst|reads|memory|fuzz|transport|idle|reconnect|all] [--workload random|family] [--quick] [--json] [--runs N]`: figures against the machine's own limits.
public struct BenchCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure the engine against the machine's own limits (raw SQLite, raw zlib, raw loopback) in the same run.")

    public enum Suite: String, ExpressibleByArgument, CaseIterable, Sendable {
        case store, sync, burst, reads, memory, fuzz, transport, idle, reconnect, all
    }

    @Argument(help: "Which figures: store, sync, burst (wire bytes of a burst of single-key commits, write→visible latency), reads (cache-miss reads during an initial sync), memory (1 GB of 100 KB values, then 1 GB of 1 MB values in chunks, over TCP), fuzz (simulator scenarios/s), transport (CPU the listener spends per rejected stranger; a frame's round trip through the transport), idle (CPU and wake-ups of a connected pair at rest), reconnect (heap a phone keeps per watch session that ended) or all (every one but memory).")
    var suite: Suite = .all

    @Option(help: "What the sync figures write: random (~200-byte JSON strings) or family (one family of small JSON objects of one shape with a long repeated string).")
    var workload: BenchWorkload = .random

    @Flag(help: "A short smoke run (small counts).")
    var quick = false

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    /// `.unconditional`, as `--latency-samples`: `--runs -1` is a bad value, not a missing one (-1 taken for an option).
    @Option(parsing: .unconditional, help: "Run the figures this many times and print each one's median (value, baseline and ratio each the median of its runs).")
    var runs = 1

    @Option(name: .customLong("latency-samples"), parsing: .unconditional, help: "With sync: how many single writes its write→visible phase times (default 1000, 50 with --quick; issue 17's p99 target is set on 1000). More reach rarer stalls of the app's write.")
    var latencySamples: Int?

    /// `memory` runs each value size in a child process of its own (this
    /// option, then `--json`), so one size's peak does not include the heap
    /// the allocator kept from the other's gigabyte.
    @Option(name: .customLong("memory-values"), help: .hidden)
    var memoryValues: MemoryBenchmark.ValueSize?

    @Flag(name: .customLong("same-process"), help: "With memory: run both value sizes in this process, one after the other (before, each ran so; the second then also holds what the allocator kept from the first).")
    var sameProcess = false

    public init() {}

    public func validate() throws {
        guard runs >= 1 else { throw ValidationError("--runs must be at least 1, not \(runs)") }
        if let latencySamples, !(10...1_000_000).contains(latencySamples) {
            throw ValidationError("--latency-samples must be 10...1000000, not \(latencySamples)")
        }
    }

    public func run() async throws {
        let progress: (String) -> Void = { message in
            try? FileHandle.standardError.write(contentsOf: Data("  … \(message)\n".utf8))
        }
        var figuresOfEachRun: [[BenchFigure]] = []
        for run in 0..<runs {
            if runs > 1 { progress("run \(run + 1) of \(runs)") }
            figuresOfEachRun.append(try await figures(progress: progress))
        }
        let figures = runs == 1 ? figuresOfEachRun[0] : BenchFigure.medians(of: figuresOfEachRun)
        if runs > 1 { progress("each figure below is the median of \(runs) runs") }
        try printFigures(figures)
    }

    /// One run of the chosen suite.
    private func figures(progress: @escaping (String) -> Void) async throws -> [BenchFigure] {
        var figures: [BenchFigure] = []
        if suite == .store || suite == .all {
            figures += try StoreBenchmark(quick: quick).run(progress: progress)
            figures += try WALTrimBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .sync || suite == .all {
            var sync = SyncBenchmark(quick: quick, workload: workload)
            if let latencySamples { sync.latencySamples = latencySamples }
            figures += try await sync.run(progress: progress)
        }
        if suite == .burst || suite == .all {
            figures += try await BurstBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .reads || suite == .all {
            figures += try await ReadDuringSyncBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .fuzz || suite == .all {
            figures += try await FuzzBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .transport || suite == .all {
            figures += try await RejectionBenchmark(quick: quick).run(progress: progress)
            figures += try await FrameRoundTripBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .idle || suite == .all {
            figures += try await IdleBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .reconnect || suite == .all {
            figures += try await ReconnectBenchmark(quick: quick).run(progress: progress)
        }
        if suite == .memory {
            if let memoryValues {
                figures += try await MemoryBenchmark(memoryValues, quick: quick).run(progress: progress)
            } else if sameProcess {
                for size in MemoryBenchmark.ValueSize.allCases {
                    figures += try await MemoryBenchmark(size, quick: quick).run(progress: progress)
                }
            } else {
                for size in MemoryBenchmark.ValueSize.allCases {
                    figures += try MemoryBenchmark.runInChildProcess(size, quick: quick)
                }
            }
        }
        return figures
    }

    private func printFigures(_ figures: [BenchFigure]) throws {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(figures), as: UTF8.self))
        } else {
            let width = figures.map(\.name.count).max() ?? 0
            for figure in figures { print(figure.line(nameWidth: width)) }
        }
    }
}

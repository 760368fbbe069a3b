import Foundation
import Synchronization
@_spi(Benchmarks) import SyncEngine

/// The store's figures against the machine's limits measured in the same run:
/// cached typed reads vs a `Mutex`-guarded `Dictionary`, batched typed writes
/// vs a raw SQLite C-API insert of the same rows in one transaction, and the
/// latency of one committed write.
public struct StoreBenchmark: Sendable {
    public var rows: Int
    public var reads: Int

    public init(quick: Bool) {
        rows = quick ? 5_000 : 100_000
        reads = quick ? 200_000 : 5_000_000
    }

    public func run(progress: (String) -> Void = { _ in }) throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let family = KeyFamily<String>("bench", default: "", availability: .all, policy: .automaticSmall)
        let single = Key<Int>("bench-single", default: 0)
        let registry = try KeyRegistry([family, single])
        let values = (0..<rows).map { "value-\($0)-" + String(repeating: "x", count: 40) }
        let encoded = try values.map { try ValueSerializer<String>.json.encode($0) }

        // Raw limit: SQLite C API, one WAL transaction, prepared statement.
        progress("raw SQLite insert of \(rows) rows")
        let rawSeconds = try fastestRawInsert(path: folder + "/raw.sqlite", values: encoded)

        // What bounds the typed figure: SQLite alone for the store's row layout,
        // and (below) collecting the same writes (keys, JSON, checks) without committing.
        progress("raw SQLite insert of \(rows) rows in the store's table layout")
        let layoutSeconds = try RawInsertBaseline.fastestStoreLayoutSeconds(path: folder + "/layout.sqlite", values: encoded)

        // The fastest of three runs, each into a new store, as its two baselines are
        // measured (before 2026-11-26 the first run alone, reported below too).
        progress("\(rows) batched typed writes, 3 runs")
        var typedRuns: [Double] = []
        var store: SyncStore!
        for run in 0..<3 {
            if let earlier = store {
                earlier.close()
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: folder + "/store-\(run - 1).sqlite" + suffix) }
            }
            store = try SyncStore(path: folder + "/store-\(run).sqlite", role: .phone, registry: registry)
            typedRuns.append(try BenchClock.seconds {
                try store.batchNow { batch in
                    for i in 0..<rows { try batch.set(values[i], for: family["k\(i)"]) }
                }
            })
        }
        let typedSeconds = typedRuns.min()!

        // After the typed writes, so that they do not run on a heap this warmed.
        var collected = WriteBatch.detached(for: store)
        let collectSeconds = try BenchClock.seconds {
            for i in 0..<rows { try collected.set(values[i], for: family["k\(i)"]) }
        }
        if collected.writeCount != rows { print("") }
        collected = WriteBatch.detached(for: store)

        progress("\(reads) cached reads")
        try store.setNow(42, for: single)
        _ = try store.value(for: single)
        var sink = 0
        let cachedSeconds = try BenchClock.seconds {
            for _ in 0..<reads { sink &+= try store.value(for: single) }
        }
        // The same reads through the protocol (`any KeyValueBackend`): the generic path every read took before round two.
        let backend: any KeyValueBackend = store
        let protocolSeconds = try BenchClock.seconds {
            for _ in 0..<reads { sink &+= try backend.value(for: single) }
        }
        let dictionary = Mutex<[String: Int]>(["bench-single": 42])
        let dictionarySeconds = BenchClock.seconds {
            for _ in 0..<reads { sink &+= dictionary.withLock { $0["bench-single"] ?? 0 } }
        }
        if sink == 0 { print("") }

        progress("single write latency")
        var latencies: [Double] = []
        for i in 0..<(rows >= 100_000 ? 2_000 : 200) {
            latencies.append(try BenchClock.seconds { try store.setNow(i, for: single) })
        }
        latencies.sort()

        // The watch's half of a write→visible: a session applying a batch of one entry, each
        // a newer version of one key written over the one before (no conflict).
        progress("one remote entry applied at a time")
        let remoteKey = family["remote"]
        let remoteValue = try ValueSerializer<String>.json.encode("{\"sample\":1234}")
        let firstMilliseconds = Int64(Date().timeIntervalSince1970 * 1000)
        var previous = HLCTimestamp.zero
        var applyLatencies: [Double] = []
        for i in 0..<latencies.count {
            let version = HLCTimestamp(physicalMilliseconds: firstMilliseconds, counter: UInt16(i), node: StoreBenchmark.remoteNode)
            let entry = WireEntry(key: remoteKey.name, version: version, base: previous, deleted: false,
                                  encoding: family.descriptor.encoding, value: remoteValue)
            var applied = 0
            applyLatencies.append(try BenchClock.seconds { applied = try store.applyRemoteBatch([entry], from: .watch) })
            guard applied == 1 else { throw BenchError("remote entry \(i) was not applied") }
            previous = version
        }
        applyLatencies.sort()
        store.close()

        // What both are measured against: a raw one-row SQLite commit with the store's pragmas.
        progress("raw one-row SQLite commits")
        let raw = try RawCommitBaseline(path: folder + "/commits.sqlite")
        var rawCommits: [Double] = []
        for _ in 0..<latencies.count { rawCommits.append(try BenchClock.seconds { try raw.commit(remoteValue, key: "one") }) }
        rawCommits.sort()

        let rawRate = Double(rows) / rawSeconds
        let typedRate = Double(rows) / typedSeconds
        let cachedRate = Double(reads) / cachedSeconds
        let dictionaryRate = Double(reads) / dictionarySeconds
        return [
            BenchFigure(name: "cached typed reads/s", value: cachedRate, unit: "reads/s", baseline: dictionaryRate,
                        baselineName: "Mutex<Dictionary> reads/s", ratio: cachedRate / dictionaryRate, target: "≥ 0.5"),
            BenchFigure(name: "cached typed reads/s through any KeyValueBackend", value: Double(reads) / protocolSeconds, unit: "reads/s",
                        baseline: dictionaryRate, baselineName: "Mutex<Dictionary> reads/s", ratio: Double(reads) / protocolSeconds / dictionaryRate),
            BenchFigure(name: "batched typed writes/s (\(rows) rows, 1 tx)", value: typedRate, unit: "rows/s", baseline: rawRate,
                        baselineName: "raw SQLite insert rows/s", ratio: typedRate / rawRate, target: "≥ 0.5"),
            BenchFigure(name: "batched typed writes/s, the first of the 3 runs alone (the figure before 2026-11-26)", value: Double(rows) / typedRuns[0],
                        unit: "rows/s", baseline: rawRate, baselineName: "raw SQLite insert rows/s", ratio: Double(rows) / typedRuns[0] / rawRate),
            BenchFigure(name: "raw SQLite insert into the store's table layout rows/s", value: Double(rows) / layoutSeconds, unit: "rows/s",
                        baseline: rawRate, baselineName: "raw SQLite insert rows/s", ratio: Double(rows) / layoutSeconds / rawRate),
            BenchFigure(name: "collecting \(rows) typed writes (no commit) rows/s", value: Double(rows) / collectSeconds, unit: "rows/s",
                        baseline: rawRate, baselineName: "raw SQLite insert rows/s", ratio: Double(rows) / collectSeconds / rawRate),
            BenchFigure(name: "one committed write p50", value: latencies[latencies.count / 2] * 1e6, unit: "µs"),
            BenchFigure(name: "one committed write p99", value: latencies[latencies.count * 99 / 100] * 1e6, unit: "µs"),
        ] + againstRawCommit(rawCommits, ("one committed write", latencies),
                             ("one remote entry applied (a batch of one, as a session applies it)", applyLatencies))
    }

    /// The node id of the remote entries the benchmark applies.
    static let remoteNode: UInt32 = 0xBEEF

    /// The raw commit's p50 and p99, and each of `measured` against them (seconds in, µs out).
    private func againstRawCommit(_ raw: [Double], _ measured: (String, [Double])...) -> [BenchFigure] {
        func percentile(_ sorted: [Double], _ p: Int) -> Double { sorted[min(sorted.count - 1, sorted.count * p / 100)] * 1e6 }
        let raw50 = percentile(raw, 50), raw99 = percentile(raw, 99)
        var figures = [
            BenchFigure(name: "raw one-row SQLite commit p50 (the store's pragmas)", value: raw50, unit: "µs"),
            BenchFigure(name: "raw one-row SQLite commit p99 (the store's pragmas)", value: raw99, unit: "µs"),
        ]
        for (name, latencies) in measured {
            let p50 = percentile(latencies, 50), p99 = percentile(latencies, 99)
            figures.append(BenchFigure(name: name + " p50 ÷ raw commit p50", value: p50, unit: "µs", baseline: raw50,
                                       baselineName: "raw commit µs", ratio: p50 / raw50))
            figures.append(BenchFigure(name: name + " p99 ÷ raw commit p99", value: p99, unit: "µs", baseline: raw99,
                                       baselineName: "raw commit µs", ratio: p99 / raw99))
        }
        return figures
    }

    /// The machine's insert limit: the fastest of `runs` raw SQLite C-API inserts
    /// of `values` under keys `bench:k<i>`, one transaction each (`RawInsertBaseline`).
    func fastestRawInsert(path: String, values: [[UInt8]], runs: Int = 3) throws -> Double {
        try RawInsertBaseline.fastestSeconds(path: path, values: values, runs: runs)
    }
}

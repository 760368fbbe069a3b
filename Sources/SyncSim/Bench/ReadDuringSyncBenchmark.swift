import Foundation
import Synchronization
@_spi(Testing) @_spi(Benchmarks) import SyncEngine
import SyncTransport

/// Cache-miss reads on the watch while it receives an initial sync of
/// `entries` entries over TCP, against the same reads on the idle store
/// (`syncsim bench reads`). Run with reader connections (round two's default)
/// and with every read on the writer's connection (before), alternately in
/// one run. A thread of its own reads one of the watch's own keys every
/// ~100 µs (the cache keeps nothing, so each read goes to SQLite).
public struct ReadDuringSyncBenchmark: Sendable {
    var entries: Int
    var localKeys = 2_000
    var idleReads: Int
    var runs: Int

    public init(quick: Bool) {
        entries = quick ? 2_000 : 100_000
        idleReads = quick ? 500 : 5_000
        runs = quick ? 1 : 2
    }

    static let local = KeyFamily<String>("local", default: "", availability: .all, policy: .never)

    struct Measured {
        var idle: [Double] = []
        var duringSync: [Double] = []
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        let values = SyncBenchmark.values(count: entries, seed: 42)
        var readers: [Measured] = [], writer: [Measured] = []
        for run in 0..<runs {
            for readerConnections in [0, 2] {
                progress("cache-miss reads on the watch, idle and during an initial sync of \(entries) entries, \(readerConnections == 0 ? "on the writer (before)" : "\(readerConnections) reader connections"), run \(run + 1)")
                let measured = try await measure(values: values, readerConnections: readerConnections)
                if readerConnections == 0 { writer.append(measured) } else { readers.append(measured) }
            }
        }
        func percentile(_ all: [Measured], _ path: KeyPath<Measured, [Double]>, _ p: Double) -> Double {
            let values = all.map { measured -> Double in
                let sorted = measured[keyPath: path].sorted()
                return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
            }.sorted()
            return values[values.count / 2]
        }
        let tag = runs > 1 ? " (median of \(runs) runs)" : ""
        var figures: [BenchFigure] = []
        for (name, all) in [("", readers), (", on the writer (before)", writer)] {
            let idle99 = percentile(all, \.idle, 0.99), sync99 = percentile(all, \.duringSync, 0.99)
            let idle50 = percentile(all, \.idle, 0.5), sync50 = percentile(all, \.duringSync, 0.5)
            figures += [
                BenchFigure(name: "cache-miss read p50, idle store" + name + tag, value: idle50, unit: "µs"),
                BenchFigure(name: "cache-miss read p99, idle store" + name + tag, value: idle99, unit: "µs"),
                BenchFigure(name: "cache-miss read p50 during initial sync" + name + tag, value: sync50, unit: "µs",
                            baseline: idle50, baselineName: "idle p50 µs", ratio: sync50 / idle50),
                BenchFigure(name: "cache-miss read p99 during initial sync" + name + tag, value: sync99, unit: "µs",
                            baseline: idle99, baselineName: "idle p99 µs", ratio: sync99 / idle99,
                            target: name.isEmpty ? "≤ 3× idle" : nil),
                BenchFigure(name: "cache-miss reads during initial sync" + name + tag,
                            value: Double(all.map(\.duringSync.count).sorted()[all.count / 2]), unit: "reads"),
            ]
        }
        return figures
    }

    /// Reads on a thread of its own, one every ~100 µs, until `done`; the latency of each, in µs.
    static func readLoop(_ store: SyncStore, keys: Int, limit: Int, done: StopFlag) -> [Double] {
        var latencies: [Double] = []
        latencies.reserveCapacity(limit)
        var i = 0
        while latencies.count < limit && !done.isSet {
            let key = ReadDuringSyncBenchmark.local["k\(i % keys)"]
            let begin = ContinuousClock.now
            _ = try? store.value(for: key)
            latencies.append(BenchClock.seconds(since: begin) * 1e6)
            i += 1
            usleep(100)
        }
        return latencies
    }

    /// Runs `readLoop` on a thread of its own (never on the concurrency pool) and waits for it.
    static func reading(_ store: SyncStore, keys: Int, limit: Int, done: StopFlag) async -> [Double] {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: readLoop(store, keys: keys, limit: limit, done: done)) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    func measure(values: [String], readerConnections: Int) async throws -> Measured {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let registry = try KeyRegistry([SyncBenchmark.family, ReadDuringSyncBenchmark.local])
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        var watchOptions = StoreOptions()
        watchOptions.maxCachedValueSize = -1  // nothing cached: every read goes to SQLite
        watchOptions.readerConnections = readerConnections
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry, options: watchOptions)
        defer {
            phone.close()
            watch.close()
        }
        try phone.batchNow { batch in
            for i in 0..<entries { try batch.set(values[i], for: SyncBenchmark.family["k\(i)"]) }
        }
        try watch.batchNow { batch in
            for i in 0..<localKeys { try batch.set(values[i % values.count], for: ReadDuringSyncBenchmark.local["k\(i)"]) }
        }
        var measured = Measured()
        let notDone = StopFlag()
        measured.idle = await ReadDuringSyncBenchmark.reading(watch, keys: localKeys, limit: idleReads, done: notDone)

        let secret = PairingSecret.generate()
        let configuration = TCPConfiguration(secret: secret)
        let replication = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phonePeer = SyncPeer(store: phone, configuration: replication, tickInterval: .milliseconds(50))
        let watchPeer = SyncPeer(store: watch, configuration: replication, tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let done = StopFlag()
        let readsDuringSync = Task { await ReadDuringSyncBenchmark.reading(watch, keys: localKeys, limit: 1_000_000, done: done) }
        let server = Task { await phonePeer.serve(listener) }
        let client = Task { await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        try await phonePeer.waitUntilIdle(timeout: .seconds(600))
        done.set()
        measured.duringSync = await readsDuringSync.value
        client.cancel()
        await listener.close()
        server.cancel()
        _ = await (server.value, client.value)
        return measured
    }
}

/// Tells a reading thread to stop.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
    func set() { flag.store(true, ordering: .relaxed) }
}

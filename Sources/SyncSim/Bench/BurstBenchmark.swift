import Foundation
import Synchronization
@_spi(Testing) @_spi(Benchmarks) import SyncEngine
import SyncTransport

/// Burst coalescing over real TCP on 127.0.0.1 (`syncsim bench burst`), with
/// coalescing on (`ReplicationConfiguration.burstCoalescing`, the default) and
/// off (each commit sent at once, before round two), alternately in one run:
///
/// - wire bytes of `commits` single-key commits made one after the other,
///   each its own transaction (an app writing samples one by one), against
///   the same changes committed in one transaction and sent as one batch;
/// - write→visible latency of single writes on an idle link (each waits until
///   the watch's observer sees it), against the raw loopback round trip.
public struct BurstBenchmark: Sendable {
    var commits: Int
    var latencySamples: Int
    var runs: Int

    public init(quick: Bool) {
        commits = quick ? 100 : 1_000
        latencySamples = quick ? 50 : 1_000
        runs = quick ? 1 : 2
    }

    static let burstFamily = KeyFamily<String>("burst", default: "", availability: .all, policy: .automaticSmall)
    static let batchFamily = KeyFamily<String>("batch", default: "", availability: .all, policy: .automaticSmall)

    /// A small JSON sample, as a health app writes them.
    static func sample(_ i: Int) -> String {
        "{\"t\":\(1_732_390_000_000 + i * 1_000),\"bpm\":\(60 + (i * 7) % 40),\"seq\":\(i)}"
    }

    struct Measured {
        var burstBytes = 0
        var burstBatches = 0
        var burstCommitSeconds = 0.0
        var batchBytes = 0
        var p50 = 0.0
        var p99 = 0.0
        /// The same, each write made once the previous one was acknowledged (nothing in flight).
        var quietP50 = 0.0
        var quietP99 = 0.0
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        progress("raw loopback round trip")
        let loopback = try LoopbackBaseline.measure(bytes: 16 << 20, roundTrips: 2_000)
        var on: [Measured] = [], off: [Measured] = []
        for run in 0..<runs {
            for coalescing in [false, true] {
                progress("burst of \(commits) commits, one batch of \(commits), \(latencySamples) write→visible, coalescing \(coalescing ? "on" : "off"), run \(run + 1)")
                let measured = try await measure(coalescing: coalescing)
                if coalescing { on.append(measured) } else { off.append(measured) }
            }
        }
        progress("\(latencySamples) write→visible over the in-memory link (no sockets)")
        let inMemory = try await inMemoryLatency()
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let rtt = loopback.roundTripMicroseconds
        let burstOn = median(on.map { Double($0.burstBytes) / Double($0.batchBytes) })
        let burstOff = median(off.map { Double($0.burstBytes) / Double($0.batchBytes) })
        let p99On = median(on.map(\.p99)), p99Off = median(off.map(\.p99))
        let p50On = median(on.map(\.p50)), p50Off = median(off.map(\.p50))
        let quietP50 = median(on.map(\.quietP50)), quietP99 = median(on.map(\.quietP99))
        let tag = runs > 1 ? " (median of \(runs) runs)" : ""
        return [
            BenchFigure(name: "raw loopback round trip p50", value: rtt, unit: "µs"),
            BenchFigure(name: "burst of \(commits) single-key commits, TCP wire bytes" + tag, value: median(on.map { Double($0.burstBytes) }), unit: "bytes",
                        baseline: median(on.map { Double($0.batchBytes) }), baselineName: "same changes as one batch, bytes",
                        ratio: burstOn, target: "≤ 2"),
            BenchFigure(name: "burst of \(commits): batches sent" + tag, value: median(on.map { Double($0.burstBatches) }), unit: "batches"),
            BenchFigure(name: "burst of \(commits): time between commits" + tag,
                        value: median(on.map { $0.burstCommitSeconds / Double(commits) * 1e6 }), unit: "µs"),
            BenchFigure(name: "burst ÷ one batch, coalescing off (before)" + tag, value: burstOff, unit: "×",
                        baseline: median(off.map { Double($0.burstBatches) }), baselineName: "batches sent"),
            BenchFigure(name: "write→visible p50 (TCP, idle link)" + tag, value: p50On, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: p50On / rtt),
            BenchFigure(name: "write→visible p99 (TCP, idle link)" + tag, value: p99On, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: p99On / rtt, target: "≤ 10× RTT"),
            BenchFigure(name: "write→visible p50, each write after the previous one's ack" + tag, value: quietP50, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: quietP50 / rtt),
            BenchFigure(name: "write→visible p99, each write after the previous one's ack" + tag, value: quietP99, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: quietP99 / rtt),
            BenchFigure(name: "write→visible p50, in-memory link (the engine without sockets)", value: inMemory.p50, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: inMemory.p50 / rtt),
            BenchFigure(name: "write→visible p99, in-memory link (the engine without sockets)", value: inMemory.p99, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: inMemory.p99 / rtt),
            BenchFigure(name: "write→visible p50, coalescing off (before)" + tag, value: p50Off, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: p50Off / rtt),
            BenchFigure(name: "write→visible p99, coalescing off (before)" + tag, value: p99Off, unit: "µs", baseline: rtt,
                        baselineName: "raw RTT µs", ratio: p99Off / rtt),
        ]
    }

    /// write→visible of single writes between a phone and a watch joined by
    /// an `InMemoryConnection`: what the engine costs without the transport.
    func inMemoryLatency() async throws -> (p50: Double, p99: Double) {
        let stores = try BenchStores(registry: KeyRegistry([SyncBenchmark.family]))
        defer { stores.remove() }
        let (phone, watch) = (stores.phone, stores.watch)
        let replication = ReplicationConfiguration(pairingEpoch: "bench")
        let phonePeer = SyncPeer(store: phone, configuration: replication, tickInterval: .milliseconds(50))
        let watchPeer = SyncPeer(store: watch, configuration: replication, tickInterval: .milliseconds(50))
        let (a, b) = InMemoryConnection.makePair()
        let sessions = [Task { await phonePeer.run(over: a) }, Task { await watchPeer.run(over: b) }]
        try await phonePeer.waitUntilIdle(timeout: .seconds(60))
        let latency = try await BurstBenchmark.writeToVisible(samples: latencySamples, from: phone, to: watch)
        await a.close()
        for session in sessions { _ = await session.value }
        return latency
    }

    /// p50 and p99 (µs) of `samples` single writes on `phone` until `watch`'s
    /// observer sees each; `beforeEach` runs before each write is timed.
    static func writeToVisible(samples: Int, from phone: SyncStore, to watch: SyncStore, tag: String = "sample",
                               beforeEach: () async throws -> Void = {}) async throws -> (p50: Double, p99: Double) {
        let probe = SyncBenchmark.family["latency"]
        let changes = watch.changes(for: probe)
        var iterator = changes.makeAsyncIterator()
        var latencies: [Double] = []
        for i in 0..<samples {
            try await beforeEach()
            let begin = ContinuousClock.now
            try phone.setNow("{\"\(tag)\":\(i)}", for: probe)
            _ = await iterator.next()
            latencies.append(BenchClock.seconds(since: begin) * 1e6)
        }
        latencies.sort()
        return (latencies[latencies.count / 2], latencies[min(latencies.count - 1, latencies.count * 99 / 100)])
    }

    /// A new phone and watch over TCP: the burst, the one batch, then the latency samples.
    func measure(coalescing: Bool) async throws -> Measured {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let registry = try KeyRegistry([BurstBenchmark.burstFamily, BurstBenchmark.batchFamily, SyncBenchmark.family])
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry)
        let secret = PairingSecret.generate()
        let wireBytes = Atomic<Int>(0)
        var tcp = TCPConfiguration(secret: secret)
        tcp.onWireByteCount = { direction, count in
            if direction == .outbound { wireBytes.wrappingAdd(count, ordering: .relaxed) }
        }
        let configuration = tcp
        var replication = ReplicationConfiguration(pairingEpoch: secret.epoch)
        if !coalescing { replication.burstCoalescing = nil }
        let phonePeer = SyncPeer(store: phone, configuration: replication, tickInterval: .milliseconds(50))
        let watchPeer = SyncPeer(store: watch, configuration: replication, tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let server = Task { await phonePeer.serve(listener) }
        let client = Task { await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        defer {
            phone.close()
            watch.close()
        }
        try await phonePeer.waitUntilIdle(timeout: .seconds(60))
        var measured = Measured()

        // The burst: one transaction per commit, back to back.
        var before = wireBytes.load(ordering: .relaxed)
        let batchesBefore = phone.syncCounters.batchesSent
        measured.burstCommitSeconds = try BenchClock.seconds {
            for i in 0..<commits { try phone.setNow(BurstBenchmark.sample(i), for: BurstBenchmark.burstFamily["k\(i)"]) }
        }
        try await phonePeer.waitUntilIdle(timeout: .seconds(120))
        measured.burstBytes = wireBytes.load(ordering: .relaxed) - before
        measured.burstBatches = phone.syncCounters.batchesSent - batchesBefore

        // The same changes (keys of the same length) in one transaction: one batch.
        before = wireBytes.load(ordering: .relaxed)
        try phone.batchNow { batch in
            for i in 0..<commits { try batch.set(BurstBenchmark.sample(i), for: BurstBenchmark.batchFamily["k\(i)"]) }
        }
        try await phonePeer.waitUntilIdle(timeout: .seconds(120))
        measured.batchBytes = wireBytes.load(ordering: .relaxed) - before

        // write→visible, one write at a time, each waiting for the watch to see it.
        (measured.p50, measured.p99) = try await BurstBenchmark.writeToVisible(samples: latencySamples, from: phone, to: watch)
        // Again, each write once the previous one is acknowledged on both sides: no
        // acknowledgement, cursor commit or fsync of the previous write runs beside it.
        (measured.quietP50, measured.quietP99) = try await BurstBenchmark.writeToVisible(samples: latencySamples, from: phone, to: watch,
                                                                                         tag: "quiet") {
            try await phonePeer.waitUntilIdle(timeout: .seconds(60))
            try await watchPeer.waitUntilIdle(timeout: .seconds(60))
        }
        client.cancel()
        await listener.close()
        server.cancel()
        _ = await (server.value, client.value)
        return measured
    }
}

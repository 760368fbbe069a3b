import Foundation
import Synchronization
@_spi(Testing) @_spi(Benchmarks) import SyncEngine
import SyncTransport

/// Initial and incremental sync, bytes on the wire and write→visible latency
/// over real TCP on 127.0.0.1, against raw loopback, raw SQLite and raw zlib
/// measured in the same run.
struct TCPSyncBenchmark {
    var entries: Int
    var changed: Int
    var latencySamples: Int
    /// false: the watch acknowledges batches without syncing them first (the
    /// behaviour before acknowledgements were durable), for the comparison
    /// rows; only those rows are returned.
    var acksSynced = true
    /// What the phone writes.
    var workload: BenchWorkload = .random
    /// The session protocols both peers speak; `1...1` (before wire v2)
    /// returns only the wire-byte rows, for the comparison.
    var protocolRange: ClosedRange<UInt16> = ReplicationConfiguration().protocolRange

    func run(progress: (String) -> Void) async throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        progress("raw loopback throughput and round trip")
        let isComparison = !acksSynced || protocolRange.upperBound < 2
        let loopback = !isComparison ? try LoopbackBaseline.measure(bytes: 256 << 20, roundTrips: 2_000)
            : LoopbackBaseline.Figures(megabytesPerSecond: 0, roundTripMicroseconds: 0)
        let registry = try BenchRows.registry()
        let rows = BenchRows(workload, count: entries)
        let encoded = try (0..<entries).map { try rows.encoded($0) }
        progress("raw SQLite insert")
        let rawSeconds = try StoreBenchmark(quick: true).fastestRawInsert(path: folder + "/raw.sqlite", values: encoded)
        // What SQLite alone needs to write the same rows into the store's own
        // table (the watch's share of an initial sync, before any work of the engine's).
        let layoutSeconds = isComparison ? 0 : try RawInsertBaseline.fastestStoreLayoutSeconds(path: folder + "/layout.sqlite", values: encoded)
        progress("raw zlib (level 6) of the same keys and values")
        let rawPayload = try rows.rawKeysAndValues(0..<entries)
        let rawDeflated = try Compression.deflate(rawPayload, level: 6).count
        let changedRaw = try rows.rawKeysAndValues(0..<changed, changed: true)
        let changedDeflated = try Compression.deflate(changedRaw, level: 6).count

        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        var watchOptions = StoreOptions()
        watchOptions.syncsBeforeAcknowledging = acksSynced
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry, options: watchOptions)
        try phone.batchNow { batch in try rows.write(0..<entries, into: &batch) }
        let secret = PairingSecret.generate()
        let wireBytes = Atomic<Int>(0)
        var tcp = TCPConfiguration(secret: secret)
        // Each byte once: what either peer wrote (the other reads the same bytes).
        tcp.onWireByteCount = { direction, count in
            if direction == .outbound { wireBytes.wrappingAdd(count, ordering: .relaxed) }
        }
        let configuration = tcp
        var replication = ReplicationConfiguration(pairingEpoch: secret.epoch)
        replication.protocolRange = protocolRange
        let phonePeer = SyncPeer(store: phone, configuration: replication, tickInterval: .milliseconds(50))
        let watchPeer = SyncPeer(store: watch, configuration: replication, tickInterval: .milliseconds(50))

        progress("initial sync of \(entries) entries over TCP")
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let cpuBefore = BenchClock.processCPUSeconds()
        let start = ContinuousClock.now
        let server = Task { await phonePeer.serve(listener) }
        let client = Task { await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        try await phonePeer.waitUntilIdle(timeout: .seconds(600))
        let elapsed = ContinuousClock.now - start
        let syncSeconds = BenchClock.seconds(elapsed)
        let syncCPUSeconds = BenchClock.processCPUSeconds() - cpuBefore
        let initialWire = wireBytes.load(ordering: .relaxed)

        let initialSessions = phone.syncCounters.sessions

        progress("incremental sync of \(changed) changed entries over TCP")
        // Counted from before the commit: the commit wakes replication at once.
        let wireBeforeIncremental = wireBytes.load(ordering: .relaxed)
        let incrementalStart = ContinuousClock.now
        try phone.batchNow { batch in try rows.write(0..<changed, changed: true, into: &batch) }
        try await phonePeer.waitUntilIdle(timeout: .seconds(600))
        let incrementalSeconds = BenchClock.seconds(since: incrementalStart)
        let incrementalWire = wireBytes.load(ordering: .relaxed) - wireBeforeIncremental

        let samples = isComparison && !acksSynced ? latencySamples : isComparison ? 0 : latencySamples
        progress("write→visible latency, \(samples) single writes")
        let probe = SyncBenchmark.family["latency"]
        let changes = watch.changes(for: probe)
        var iterator = changes.makeAsyncIterator()
        var latencies: [Double] = []
        var writeTimes: [Double] = []  // the app's `setNow` alone
        let latencyCPUBefore = BenchClock.processCPUSeconds()
        let latencySwitchesBefore = BenchClock.processContextSwitches()
        for i in 0..<samples {
            let begin = ContinuousClock.now
            try phone.setNow("{\"sample\":\(i)}", for: probe)
            let wrote = ContinuousClock.now
            _ = await iterator.next()
            let took = ContinuousClock.now - begin
            latencies.append(BenchClock.seconds(took) * 1e6)
            writeTimes.append(BenchClock.seconds(wrote - begin) * 1e6)
        }
        let latencyCPU = BenchClock.processCPUSeconds() - latencyCPUBefore
        let latencySwitches = BenchClock.processContextSwitches() - latencySwitchesBefore
        latencies.sort()
        writeTimes.sort()
        client.cancel()
        await listener.close()
        server.cancel()
        _ = await (server.value, client.value)
        phone.close()
        watch.close()
        // The floor under those samples, on the same machine in the same run.
        let measuresFloor = !isComparison && samples > 0
        if measuresFloor { progress("write→visible floor: raw commits and loopback round trips, \(samples) samples") }
        let floor = !measuresFloor ? []
            : try LoopbackBaseline.writeToVisibleFloor(folder: folder, samples: samples, value: Array("{\"sample\":1234}".utf8))

        let rate = Double(entries) / syncSeconds
        let rawRate = Double(entries) / rawSeconds
        let wireRate = Double(initialWire) / syncSeconds / 1e6
        let p50 = Self.percentile(latencies, 500), p99 = Self.percentile(latencies, 990)
        let cpuPerWrite = samples == 0 ? 0 : latencyCPU * 1e6 / Double(samples)
        let incrementalRate = Double(changed) / incrementalSeconds
        if protocolRange.upperBound < 2 {
            let tag = ", protocol 1 (before wire v2)"
            return [
                BenchFigure(name: "TCP wire bytes ÷ zlib-6(raw key+value), initial" + tag, value: Double(initialWire) / Double(rawDeflated), unit: "×",
                            baseline: Double(rawDeflated), baselineName: "zlib-6 bytes", ratio: Double(initialWire) / Double(rawDeflated)),
                BenchFigure(name: "TCP wire bytes ÷ zlib-6(raw key+value), incremental" + tag, value: Double(incrementalWire) / Double(changedDeflated),
                            unit: "×", baseline: Double(changedDeflated), baselineName: "zlib-6 bytes", ratio: Double(incrementalWire) / Double(changedDeflated)),
                BenchFigure(name: "initial sync over TCP, time ÷ raw insert time" + tag, value: syncSeconds / rawSeconds, unit: "×"),
            ]
        }
        if !acksSynced {
            let tag = ", acks not synced (before the fix)"
            return [
                BenchFigure(name: "initial sync over TCP, time ÷ raw insert time" + tag, value: syncSeconds / rawSeconds, unit: "×"),
                BenchFigure(name: "incremental sync over TCP (\(changed) changed)" + tag, value: incrementalRate, unit: "entries/s",
                            baseline: rawRate, baselineName: "raw insert rows/s", ratio: incrementalRate / rawRate),
                BenchFigure(name: "write→visible p50 (TCP, idle link)" + tag, value: p50, unit: "µs"),
                BenchFigure(name: "write→visible p99 (TCP, idle link)" + tag, value: p99, unit: "µs"),
            ]
        }
        return [
            BenchFigure(name: "raw loopback throughput", value: loopback.megabytesPerSecond, unit: "MB/s"),
            BenchFigure(name: "raw loopback round trip p50", value: loopback.roundTripMicroseconds, unit: "µs"),
            BenchFigure(name: "initial sync over TCP (\(entries) entries)", value: rate, unit: "entries/s", baseline: rawRate,
                        baselineName: "raw insert rows/s", ratio: rate / rawRate, target: "time ≤ 2× raw insert (ratio ≥ 0.5)"),
            BenchFigure(name: "initial sync over TCP, time", value: syncSeconds, unit: "s", baseline: rawSeconds,
                        baselineName: "raw insert s"),
            BenchFigure(name: "initial sync over TCP, time ÷ raw insert time", value: syncSeconds / rawSeconds, unit: "×",
                        target: "≤ 2"),
            BenchFigure(name: "raw SQLite insert into the store's table layout, time ÷ raw insert time", value: layoutSeconds / rawSeconds, unit: "×",
                        baseline: rawSeconds, baselineName: "raw insert s"),
            BenchFigure(name: "initial sync over TCP, time ÷ that insert into the store's layout", value: syncSeconds / layoutSeconds, unit: "×",
                        baseline: layoutSeconds, baselineName: "layout insert s"),
            BenchFigure(name: "TCP sessions for the initial sync", value: Double(initialSessions), unit: "sessions"),
            BenchFigure(name: "initial sync CPU, both peers (cores busy)", value: syncCPUSeconds / syncSeconds, unit: "cores",
                        baseline: Double(ProcessInfo.processInfo.activeProcessorCount), baselineName: "cores",
                        ratio: syncCPUSeconds / syncSeconds / Double(ProcessInfo.processInfo.activeProcessorCount)),
            BenchFigure(name: "initial sync TCP wire throughput", value: wireRate, unit: "MB/s", baseline: loopback.megabytesPerSecond,
                        baselineName: "raw loopback MB/s", ratio: wireRate / loopback.megabytesPerSecond),
            BenchFigure(name: "TCP wire bytes ÷ raw key+value bytes", value: Double(initialWire) / Double(rawPayload.count), unit: "×"),
            BenchFigure(name: "TCP wire bytes ÷ zlib-6(raw key+value), initial", value: Double(initialWire) / Double(rawDeflated), unit: "×",
                        baseline: Double(rawDeflated), baselineName: "zlib-6 bytes", ratio: Double(initialWire) / Double(rawDeflated), target: "≤ 1.0"),
            BenchFigure(name: "TCP wire bytes per entry over zlib-6, initial", value: Double(initialWire - rawDeflated) / Double(entries), unit: "bytes"),
            BenchFigure(name: "incremental sync over TCP (\(changed) changed)", value: incrementalRate, unit: "entries/s",
                        baseline: rawRate, baselineName: "raw insert rows/s", ratio: incrementalRate / rawRate),
            BenchFigure(name: "TCP wire bytes ÷ raw key+value bytes, incremental", value: Double(incrementalWire) / Double(changedRaw.count), unit: "×"),
            BenchFigure(name: "TCP wire bytes ÷ zlib-6(raw key+value), incremental", value: Double(incrementalWire) / Double(changedDeflated), unit: "×",
                        baseline: Double(changedDeflated), baselineName: "zlib-6 bytes", ratio: Double(incrementalWire) / Double(changedDeflated), target: "≤ 1.05"),
            BenchFigure(name: "write→visible p50 (TCP, idle link)", value: p50, unit: "µs", baseline: loopback.roundTripMicroseconds,
                        baselineName: "raw RTT µs", ratio: p50 / loopback.roundTripMicroseconds),
            BenchFigure(name: "write→visible p99 (TCP, idle link)", value: p99, unit: "µs", baseline: loopback.roundTripMicroseconds,
                        baselineName: "raw RTT µs", ratio: p99 / loopback.roundTripMicroseconds, target: "≤ 10× RTT"),
            BenchFigure(name: "write→visible max", value: latencies.last ?? 0, unit: "µs"),
            BenchFigure(name: "the app's write (setNow) during write→visible, p50", value: Self.percentile(writeTimes, 500), unit: "µs"),
            BenchFigure(name: "the app's write (setNow) during write→visible, p99.9", value: Self.percentile(writeTimes, 999), unit: "µs"),
            BenchFigure(name: "the app's write (setNow) during write→visible, max", value: writeTimes.last ?? 0, unit: "µs"),
            BenchFigure(name: "write→visible CPU per write, both peers", value: cpuPerWrite, unit: "µs",
                        baseline: p50, baselineName: "write→visible p50 µs", ratio: p50 == 0 ? nil : cpuPerWrite / p50),
            BenchFigure(name: "write→visible context switches per write, both peers", value: samples == 0 ? 0 : Double(latencySwitches) / Double(samples), unit: "switches"),
        ] + floorFigures(floor, p50: p50, p99: p99, roundTrip: loopback.roundTripMicroseconds)
    }

    /// The `perMille`-th of 1,000 of `sorted` (0 when empty).
    static func percentile(_ sorted: [Double], _ perMille: Int) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, sorted.count * perMille / 1_000)]
    }

    /// The floor of write→visible (`LoopbackBaseline.writeToVisibleFloor`) and the engine's samples against it.
    private func floorFigures(_ floor: [Double], p50: Double, p99: Double, roundTrip: Double) -> [BenchFigure] {
        guard !floor.isEmpty else { return [] }
        let floor50 = floor[floor.count / 2], floor99 = floor[min(floor.count - 1, floor.count * 99 / 100)]
        let what = "(raw SQLite commit, loopback round trip, raw SQLite commit)"
        return [
            BenchFigure(name: "write→visible floor p50 \(what)", value: floor50, unit: "µs", baseline: roundTrip,
                        baselineName: "raw RTT µs", ratio: floor50 / roundTrip),
            BenchFigure(name: "write→visible floor p99 \(what)", value: floor99, unit: "µs", baseline: roundTrip,
                        baselineName: "raw RTT µs", ratio: floor99 / roundTrip),
            BenchFigure(name: "write→visible p50 ÷ its floor's p50", value: p50 / floor50, unit: "×", baseline: floor50,
                        baselineName: "floor p50 µs", ratio: p50 / floor50),
            BenchFigure(name: "write→visible p99 ÷ its floor's p99", value: p99 / floor99, unit: "×", baseline: floor99,
                        baselineName: "floor p99 µs", ratio: p99 / floor99),
        ]
    }
}

import Foundation
@_spi(Testing) @_spi(Benchmarks) import SyncEngine
@_spi(Benchmarks) import SyncTransport

/// End-to-end sync figures against the machine's limits from the same run.
public struct SyncBenchmark: Sendable {
    public var entries: Int
    public var changed: Int
    /// What the phone writes (`--workload`).
    public var workload: BenchWorkload
    /// Single writes the write→visible phase times (`--latency-samples`).
    public var latencySamples: Int

    public init(quick: Bool, workload: BenchWorkload = .random) {
        entries = quick ? 2_000 : 100_000
        changed = quick ? 100 : 1_000
        latencySamples = quick ? 50 : 1_000
        self.workload = workload
    }

    static let family = KeyFamily<String>("bench", default: "", availability: .all, policy: .automaticSmall)

    /// ~200-byte JSON values from a seeded generator.
    static func values(count: Int, seed: UInt64) -> [String] {
        var random = SeededRandom(seed: seed)
        let words = ["steps", "heart", "rate", "sleep", "stand", "move", "exercise", "calories", "distance", "floors", "workout", "ring"]
        return (0..<count).map { i in
            var parts: [String] = []
            while parts.joined(separator: " ").utf8.count < 150 {
                parts.append(words[Int(random.next(below: UInt64(words.count)))] + String(random.next(below: 10_000)))
            }
            return "{\"id\":\(i),\"note\":\"\(parts.joined(separator: " "))\"}"
        }
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let registry = try BenchRows.registry()
        let rows = BenchRows(workload, count: entries)
        let encoded = try (0..<entries).map { try rows.encoded($0) }

        progress("workload \(workload); raw limits: SQLite insert, zlib")
        let rawInsertSeconds = try StoreBenchmark(quick: true).fastestRawInsert(path: folder + "/raw.sqlite", values: encoded)
        let rawPayload = try rows.rawKeysAndValues(0..<entries)
        let changedDeflated = try Compression.deflate(try rows.rawKeysAndValues(0..<changed, changed: true), level: 6).count
        var deflated: [UInt8] = []
        let deflateSeconds = try BenchClock.seconds { deflated = try Compression.deflate(rawPayload, level: 6) }
        let inflateSeconds = try BenchClock.seconds { _ = try Compression.zlibInflate(deflated, maxOutputSize: rawPayload.count) }

        // In memory, twice each way, alternating: acknowledgements synced to disk
        // first (durable, the default) and not (what `synchronous=NORMAL` alone gave).
        let codec = FrameCodec()
        var durable = InMemorySync(), unsynced = InMemorySync()
        for run in 0..<(entries >= 100_000 ? 2 : 1) {
            for syncs in [false, true] {
                progress("initial sync of \(entries) entries and incremental sync of \(changed), in memory, acknowledgements \(syncs ? "synced (durable)" : "not synced"), run \(run + 1)")
                let measured = try inMemorySync(folder: folder + "/\(syncs ? "durable" : "unsynced")-\(run)", registry: registry,
                                                rows: rows, syncsBeforeAcknowledging: syncs, codec: codec, progress: progress)
                if syncs { durable.keepFastest(measured) } else { unsynced.keepFastest(measured) }
            }
        }
        progress("the same in memory in session protocol 1 (row batches, before wire v2), for the wire bytes")
        let protocolOne = try inMemorySync(folder: folder + "/protocol-1", registry: registry, rows: rows, syncsBeforeAcknowledging: true,
                                           codec: codec, protocolRange: 1...1, progress: progress)
        let wireBytes = durable.initialBytes, incrementalBytes = durable.incrementalBytes
        let initialSeconds = durable.initialSeconds, incrementalSeconds = durable.incrementalSeconds
        let incrementalRaw = try rows.rawKeysAndValues(0..<changed, changed: true).count

        let rawInsertRate = Double(entries) / rawInsertSeconds
        let syncRate = Double(entries) / initialSeconds
        let tcpBenchmark = TCPSyncBenchmark(entries: entries, changed: changed, latencySamples: latencySamples,
                                            workload: workload)
        let tcp = try await tcpBenchmark.run(progress: progress)
        var unsyncedTCP = tcpBenchmark
        unsyncedTCP.acksSynced = false
        progress("the same over TCP with acknowledgements not synced (before the fix), for comparison")
        let tcpUnsynced = try await unsyncedTCP.run(progress: progress)
        var protocolOneTCP = tcpBenchmark
        protocolOneTCP.protocolRange = 1...1
        progress("the same over TCP in session protocol 1 (before wire v2), for the wire bytes")
        let tcpProtocolOne = try await protocolOneTCP.run(progress: progress)
        let tag = workload == .random ? "" : " [\(workload) workload]"
        return (tcp + tcpUnsynced + tcpProtocolOne).map { $0.tagged(tag) } + [
            BenchFigure(name: "raw SQLite insert (1 WAL tx)", value: rawInsertRate, unit: "rows/s"),
            BenchFigure(name: "raw zlib deflate (level 6)", value: Double(rawPayload.count) / deflateSeconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "raw zlib inflate", value: Double(rawPayload.count) / inflateSeconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "initial sync in memory (\(entries) entries)", value: syncRate, unit: "entries/s",
                        baseline: rawInsertRate, baselineName: "raw insert rows/s", ratio: syncRate / rawInsertRate),
            BenchFigure(name: "initial sync wire bytes per entry", value: Double(wireBytes) / Double(entries), unit: "bytes"),
            BenchFigure(name: "initial sync wire ÷ zlib(raw key+value)", value: Double(wireBytes) / Double(deflated.count), unit: "×",
                        target: "≤ 1.0"),
            BenchFigure(name: "initial sync wire ÷ raw key+value bytes", value: Double(wireBytes) / Double(rawPayload.count), unit: "×"),
            BenchFigure(name: "incremental sync (\(changed) changed)", value: Double(changed) / incrementalSeconds, unit: "entries/s",
                        baseline: rawInsertRate, baselineName: "raw insert rows/s", ratio: Double(changed) / incrementalSeconds / rawInsertRate),
            BenchFigure(name: "incremental wire ÷ raw key+value bytes", value: Double(incrementalBytes) / Double(incrementalRaw), unit: "×"),
            BenchFigure(name: "incremental wire ÷ zlib(raw key+value)", value: Double(incrementalBytes) / Double(changedDeflated), unit: "×",
                        target: "≤ 1.05"),
            BenchFigure(name: "protocol 1 (before): initial sync wire ÷ zlib(raw key+value)", value: Double(protocolOne.initialBytes) / Double(deflated.count),
                        unit: "×"),
            BenchFigure(name: "protocol 1 (before): incremental wire ÷ zlib(raw key+value)",
                        value: Double(protocolOne.incrementalBytes) / Double(changedDeflated), unit: "×"),
            BenchFigure(name: "protocol 2 ÷ protocol 1: initial sync wire bytes", value: Double(wireBytes) / Double(protocolOne.initialBytes), unit: "×"),
            BenchFigure(name: "protocol 2 ÷ protocol 1: incremental wire bytes", value: Double(incrementalBytes) / Double(protocolOne.incrementalBytes),
                        unit: "×"),
            BenchFigure(name: "initial sync in memory, acks not synced (before the fix)", value: Double(entries) / unsynced.initialSeconds,
                        unit: "entries/s", baseline: rawInsertRate, baselineName: "raw insert rows/s",
                        ratio: Double(entries) / unsynced.initialSeconds / rawInsertRate),
            BenchFigure(name: "incremental sync, acks not synced (before the fix)", value: Double(changed) / unsynced.incrementalSeconds,
                        unit: "entries/s", baseline: rawInsertRate, baselineName: "raw insert rows/s",
                        ratio: Double(changed) / unsynced.incrementalSeconds / rawInsertRate),
            BenchFigure(name: "durable acks: initial sync time ÷ time with acks not synced", value: initialSeconds / unsynced.initialSeconds, unit: "×"),
            BenchFigure(name: "durable acks: incremental sync time ÷ time with acks not synced", value: incrementalSeconds / unsynced.incrementalSeconds, unit: "×"),
            BenchFigure(name: "durable acks: WAL syncs in the initial sync", value: Double(durable.batches), unit: "fsyncs"),
        ].map { $0.tagged(tag) }
    }

    /// Timings of one in-memory initial and incremental sync (the fastest run kept).
    struct InMemorySync {
        var initialSeconds = Double.infinity
        var initialBytes = 0
        var incrementalSeconds = Double.infinity
        var incrementalBytes = 0
        var batches = 0

        mutating func keepFastest(_ other: InMemorySync) {
            if other.initialSeconds < initialSeconds {
                initialSeconds = other.initialSeconds
                initialBytes = other.initialBytes
                batches = other.batches
            }
            if other.incrementalSeconds < incrementalSeconds {
                incrementalSeconds = other.incrementalSeconds
                incrementalBytes = other.incrementalBytes
            }
        }
    }

    /// A new phone with `entries` values syncs them to a new watch, then `changed` of them change and sync.
    func inMemorySync(folder: String, registry: KeyRegistry, rows: BenchRows, syncsBeforeAcknowledging: Bool,
                      codec: FrameCodec, protocolRange: ClosedRange<UInt16> = ReplicationConfiguration().protocolRange,
                      progress: (String) -> Void) throws -> InMemorySync {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var watchOptions = StoreOptions()
        watchOptions.syncsBeforeAcknowledging = syncsBeforeAcknowledging
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry, options: watchOptions)
        defer {
            phone.close()
            watch.close()
        }
        try phone.batchNow { batch in try rows.write(0..<entries, into: &batch) }
        var config = ReplicationConfiguration(pairingEpoch: "bench")
        config.protocolRange = protocolRange
        var result = InMemorySync()
        let batchesBefore = watch.syncCounters.batchesReceived
        result.initialSeconds = try BenchClock.seconds {
            result.initialBytes = try SyncBenchmark.exchange(ReplicationEndpoint(store: phone, configuration: config),
                                                             ReplicationEndpoint(store: watch, configuration: config), codec: codec)
        }
        result.batches = watch.syncCounters.batchesReceived - batchesBefore
        try phone.batchNow { batch in try rows.write(0..<changed, changed: true, into: &batch) }
        result.incrementalSeconds = try BenchClock.seconds {
            result.incrementalBytes = try SyncBenchmark.exchange(ReplicationEndpoint(store: phone, configuration: config),
                                                                 ReplicationEndpoint(store: watch, configuration: config), codec: codec)
        }
        return result
    }

    /// Runs a session between two endpoints to quiescence; returns envelope bytes moved.
    static func exchange(_ a: ReplicationEndpoint, _ b: ReplicationEndpoint, codec: FrameCodec) throws -> Int {
        var bytes = 0
        var receiverTime = Duration.zero
        var toB = a.start(now: 0)
        var toA = b.start(now: 0)
        var rounds = 0
        defer { try? FileHandle.standardError.write(contentsOf: Data("  … receiver side \(receiverTime), rounds \(rounds)\n".utf8)) }
        while (!toA.isEmpty || !toB.isEmpty) && rounds < 10_000_000 {
            rounds += 1
            let sendB = toB, sendA = toA
            toB = []
            toA = []
            let t0 = ContinuousClock.now
            for frame in sendB {
                let wire = try codec.encode(frame)
                bytes += wire.count
                toA += b.receive(try codec.decode(wire), now: 0)
            }
            receiverTime += ContinuousClock.now - t0
            for frame in sendA {
                let wire = try codec.encode(frame)
                bytes += wire.count
                toB += a.receive(try codec.decode(wire), now: 0)
            }
        }
        return bytes
    }
}

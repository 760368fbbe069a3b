import Foundation
import SyncEngine
import SyncTransport

/// End-to-end sync figures against the machine's limits from the same run.
public struct SyncBenchmark: Sendable {
    public var entries: Int
    public var changed: Int

    public init(quick: Bool) {
        entries = quick ? 2_000 : 100_000
        changed = quick ? 100 : 1_000
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
        let registry = try KeyRegistry([SyncBenchmark.family])
        let values = SyncBenchmark.values(count: entries, seed: 42)
        let encoded = try values.map { try ValueSerializer<String>.json.encode($0) }

        progress("raw limits: SQLite insert, zlib")
        let rawInsertSeconds = try StoreBenchmark(quick: true).fastestRawInsert(path: folder + "/raw.sqlite", values: encoded)
        let rawPayload = SyncBenchmark.rawKeysAndValues(encoded)
        var deflated: [UInt8] = []
        let deflateSeconds = try BenchClock.seconds { deflated = try Compression.deflate(rawPayload, level: 6) }
        let inflateSeconds = try BenchClock.seconds { _ = try Compression.inflate(deflated, maxOutputSize: rawPayload.count) }

        progress("writing \(entries) entries on the phone")
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry)
        try phone.batchNow { batch in
            for i in 0..<entries { try batch.set(values[i], for: SyncBenchmark.family["k\(i)"]) }
        }

        progress("initial sync of \(entries) entries, in memory")
        let codec = FrameCodec()
        let config = ReplicationConfiguration(pairingEpoch: "bench")
        var wireBytes = 0
        progress("phone pending: \(try phone.pendingSummary().total)")
        let initialSeconds = try BenchClock.seconds {
            wireBytes = try SyncBenchmark.exchange(ReplicationEndpoint(store: phone, configuration: config),
                                                   ReplicationEndpoint(store: watch, configuration: config), codec: codec)
        }
        progress("incremental sync of \(changed) changed entries")
        try phone.batchNow { batch in
            for i in 0..<changed { try batch.set(values[i] + "!", for: SyncBenchmark.family["k\(i)"]) }
        }
        var incrementalBytes = 0
        let incrementalSeconds = try BenchClock.seconds {
            incrementalBytes = try SyncBenchmark.exchange(ReplicationEndpoint(store: phone, configuration: config),
                                                          ReplicationEndpoint(store: watch, configuration: config), codec: codec)
        }
        let incrementalRaw = (0..<changed).reduce(0) { $0 + "bench:k\($1)".utf8.count + encoded[$1].count + 3 }
        phone.close()
        watch.close()

        let rawInsertRate = Double(entries) / rawInsertSeconds
        let syncRate = Double(entries) / initialSeconds
        let tcp = try await TCPSyncBenchmark(entries: entries, changed: changed, latencySamples: entries >= 100_000 ? 1_000 : 50).run(progress: progress)
        return tcp + [
            BenchFigure(name: "raw SQLite insert (1 WAL tx)", value: rawInsertRate, unit: "rows/s"),
            BenchFigure(name: "raw zlib deflate (level 6)", value: Double(rawPayload.count) / deflateSeconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "raw zlib inflate", value: Double(rawPayload.count) / inflateSeconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "initial sync in memory (\(entries) entries)", value: syncRate, unit: "entries/s",
                        baseline: rawInsertRate, baselineName: "raw insert rows/s", ratio: syncRate / rawInsertRate),
            BenchFigure(name: "initial sync wire bytes per entry", value: Double(wireBytes) / Double(entries), unit: "bytes"),
            BenchFigure(name: "initial sync wire ÷ zlib(raw key+value)", value: Double(wireBytes) / Double(deflated.count), unit: "×",
                        target: "≤ 1.2"),
            BenchFigure(name: "initial sync wire ÷ raw key+value bytes", value: Double(wireBytes) / Double(rawPayload.count), unit: "×"),
            BenchFigure(name: "incremental sync (\(changed) changed)", value: Double(changed) / incrementalSeconds, unit: "entries/s"),
            BenchFigure(name: "incremental wire ÷ raw key+value bytes", value: Double(incrementalBytes) / Double(incrementalRaw), unit: "×"),
        ]
    }

    /// The raw bytes the benchmarks compare the wire with: each key `bench:k<i>` followed by its value.
    static func rawKeysAndValues(_ encoded: [[UInt8]]) -> [UInt8] {
        var raw: [UInt8] = []
        raw.reserveCapacity(encoded.reduce(0) { $0 + $1.count + 12 })
        for (i, value) in encoded.enumerated() {
            raw += "bench:k\(i)".utf8
            raw += value
        }
        return raw
    }

    /// Runs a session between two endpoints to quiescence; returns envelope bytes moved.
    static func exchange(_ a: ReplicationEndpoint, _ b: ReplicationEndpoint, codec: FrameCodec) throws -> Int {
        var bytes = 0
        var receiverTime = Duration.zero
        var toB = a.start(now: 0)
        var toA = b.start(now: 0)
        var rounds = 0
        defer { FileHandle.standardError.write(Data("  … receiver side \(receiverTime), rounds \(rounds)\n".utf8)) }
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

import Foundation
import SyncEngine
import SyncTransport

/// Peak resident memory while syncing large values (default 10,000 × 100 KB =
/// 1 GB) from a phone to an empty watch over TCP on 127.0.0.1. The peak is
/// reset (Linux `clear_refs`) after the phone's writes, so it covers the sync.
struct MemoryBenchmark {
    var count: Int
    var size = SyncPolicy.automaticLimit

    static func residentMegabytes(peak: Bool) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        let field = peak ? "VmHWM:" : "VmRSS:"
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            let kilobytes = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
            return kilobytes / 1024
        }
        return 0
    }

    func run(progress: (String) -> Void) async throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let family = KeyFamily<Data>("blob", default: Data(), serializer: .data)
        let registry = try KeyRegistry([family])
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry)
        progress("writing \(count) × \(size) bytes on the phone")
        var random = SeededRandom(seed: 9)
        for start in stride(from: 0, to: count, by: 100) {
            try phone.batchNow { batch in
                for i in start..<min(count, start + 100) {
                    var bytes = [UInt8](repeating: 0, count: size)
                    for j in stride(from: 0, to: size, by: 8) { bytes[j] = UInt8(truncatingIfNeeded: random.next()) }
                    try batch.set(Data(bytes), for: family["b\(i)"])
                }
            }
        }
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        let before = MemoryBenchmark.residentMegabytes(peak: false)
        progress("syncing \(count * size / 1_000_000) MB over TCP")
        let secret = PairingSecret.generate()
        let tcp = TCPConfiguration(secret: secret)
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phonePeer = SyncPeer(store: phone, configuration: config), watchPeer = SyncPeer(store: watch, configuration: config)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let seconds = try await BenchClock.seconds {
            let server = Task { await phonePeer.serve(listener) }
            let client = Task { await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
            try await phonePeer.waitUntilIdle(timeout: .seconds(1_800))
            client.cancel()
            await listener.close()
            server.cancel()
            _ = await (server.value, client.value)
        }
        let peak = MemoryBenchmark.residentMegabytes(peak: true)
        let received = watch.syncCounters.entriesReceived
        phone.close()
        watch.close()
        return [
            BenchFigure(name: "sync \(count) × \(size / 1024) KB over TCP", value: Double(count * size) / seconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "entries received by the watch", value: Double(received), unit: "entries"),
            BenchFigure(name: "resident memory before the sync", value: before, unit: "MB"),
            BenchFigure(name: "peak resident memory during the sync", value: peak, unit: "MB", target: "≤ 100 MB"),
        ]
    }
}

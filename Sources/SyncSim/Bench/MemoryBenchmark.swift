import ArgumentParser
import Foundation
import SyncEngine
import SyncTransport

/// Peak resident memory while syncing large values (10,000 × 100 KB = 1 GB,
/// automatic; or 1,000 × 1 MB, manual values that travel in chunks after
/// `sync()`) from a phone to an empty watch over TCP on 127.0.0.1. The peak is
/// reset (Linux `clear_refs`) after the phone's writes, so it covers the sync.
/// `syncsim bench memory` runs each value size in a fresh process of its own.
public struct MemoryBenchmark: Sendable {
    /// The two runs of `bench memory`: 1 GB each.
    public enum ValueSize: String, CaseIterable, Sendable, ExpressibleByArgument {
        /// 10,000 × 100 KB, automatic.
        case kb100 = "100k"
        /// 1,000 × 1 MB, manual, in chunks.
        case mb1 = "1m"
    }

    var count: Int
    var size = SyncPolicy.automaticLimit

    /// `count` values of `size` bytes each (100 KB by default).
    public init(count: Int, size: Int = SyncPolicy.automaticLimit) {
        self.count = count
        self.size = size
    }

    /// The run for `values` (a fiftieth of the values with `quick`).
    public init(_ values: ValueSize, quick: Bool) {
        switch values {
        case .kb100: self.init(count: quick ? 200 : 10_000)
        case .mb1: self.init(count: quick ? 20 : 1_000, size: 1 << 20)
        }
    }

    /// Runs `values` in a new process of this executable (`bench memory
    /// --memory-values … --json`), its progress on this standard error, and
    /// returns its figures: the process starts with nothing allocated, so
    /// its peak is what syncing that gigabyte costs.
    static func runInChildProcess(_ values: ValueSize, quick: Bool) throws -> [BenchFigure] {
        guard let executable = Bundle.main.executableURL else {
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot find this executable to run the memory benchmark in a process of its own; use --same-process")
        }
        let child = Process()
        child.executableURL = executable
        child.arguments = ["bench", "memory", "--memory-values", values.rawValue, "--json"] + (quick ? ["--quick"] : [])
        let output = Pipe()
        child.standardOutput = output
        try child.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        child.waitUntilExit()
        guard child.terminationStatus == 0 else {
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "the memory benchmark for \(values.rawValue) values failed in its own process (exit \(child.terminationStatus))")
        }
        return try JSONDecoder().decode([BenchFigure].self, from: data)
    }

    /// Values over the automatic limit are manual: they go in chunks, released by `sync()`.
    var isChunked: Bool { size > SyncPolicy.automaticLimit }

    static func residentMegabytes(peak: Bool) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        let field = peak ? "VmHWM:" : "VmRSS:"
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            let kilobytes = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
            return kilobytes / 1024
        }
        return 0
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let family = KeyFamily<Data>("blob", default: Data(), policy: isChunked ? .manual : .automaticSmall, serializer: .data)
        let registry = try KeyRegistry([family])
        let phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
        let watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry)
        progress("writing \(count) × \(size) bytes on the phone")
        var random = SeededRandom(seed: 9)
        // About 10 MB per transaction, as an app writing large values would.
        let perBatch = max(1, min(100, 10_000_000 / size))
        for start in stride(from: 0, to: count, by: perBatch) {
            try phone.batchNow { batch in
                for i in start..<min(count, start + perBatch) {
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
            if isChunked { _ = try phonePeer.sync() }
            try await phonePeer.waitUntilIdle(timeout: .seconds(1_800))
            client.cancel()
            await listener.close()
            server.cancel()
            _ = await (server.value, client.value)
        }
        let peak = MemoryBenchmark.residentMegabytes(peak: true)
        let received = watch.syncCounters.entriesReceived
        let label = size >= 1 << 20 ? "\(size >> 20) MB" : "\(size / 1024) KB"
        phone.close()
        watch.close()
        return [
            BenchFigure(name: "sync \(count) × \(label) over TCP", value: Double(count * size) / seconds / 1e6, unit: "MB/s"),
            BenchFigure(name: "entries received by the watch (\(label) values)", value: Double(received), unit: "entries"),
            BenchFigure(name: "resident memory before the sync (\(label) values)", value: before, unit: "MB"),
            BenchFigure(name: "peak resident memory during the sync (\(label) values)", value: peak, unit: "MB", target: "≤ 100 MB"),
        ]
    }
}

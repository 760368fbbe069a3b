import Foundation
import Synchronization
import SyncEngine
import SyncTransport

/// What a connected phone and watch cost at rest (both in this process, over
/// TCP on 127.0.0.1, nothing written): CPU time and session-loop wake-ups per
/// second. Its baseline, measured in the same run: the same pair with ticks
/// every `tickInterval` however idle (`quietTickInterval` equal to it), as
/// sessions ticked before their ticks grew apart.
public struct IdleBenchmark: Sendable {
    /// The span measured, once the pair is idle.
    public var window: Duration
    /// How long the pair rests before the window (its ticks grow apart for about 6 s).
    public var settle: Duration

    public init(quick: Bool) {
        window = quick ? .seconds(2) : .seconds(10)
        settle = quick ? .seconds(2) : .seconds(7)
    }

    /// The wall clock, counting its reads: a session loop reads it once for each input it handles.
    final class CountingClock: PhysicalClock {
        private let reads = Atomic<Int>(0)
        var count: Int { reads.load(ordering: .relaxed) }

        func nowMilliseconds() -> Int64 {
            reads.add(1, ordering: .relaxed)
            return SystemClock().nowMilliseconds()
        }
    }

    struct Measured {
        var cpuMillisecondsPerSecond = 0.0
        var wakeupsPerSecond = 0.0
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        progress("an idle pair over TCP, ticks growing apart: \(BenchClock.seconds(window)) s")
        let quiet = try await measure(quietTickInterval: .seconds(5))
        progress("an idle pair over TCP, ticks every 200 ms (before): \(BenchClock.seconds(window)) s")
        let fixed = try await measure(quietTickInterval: .milliseconds(200))
        return [
            BenchFigure(name: "CPU at rest, phone and watch together", value: quiet.cpuMillisecondsPerSecond, unit: "ms/s",
                        baseline: fixed.cpuMillisecondsPerSecond, baselineName: "ticks every 200 ms ms/s",
                        ratio: fixed.cpuMillisecondsPerSecond / max(quiet.cpuMillisecondsPerSecond, 0.001)),
            BenchFigure(name: "session-loop wake-ups at rest, phone and watch", value: quiet.wakeupsPerSecond, unit: "/s",
                        baseline: fixed.wakeupsPerSecond, baselineName: "ticks every 200 ms /s",
                        ratio: fixed.wakeupsPerSecond / max(quiet.wakeupsPerSecond, 0.001)),
        ]
    }

    func measure(quietTickInterval: Duration) async throws -> Measured {
        let stores = try BenchStores(registry: KeyRegistry([SyncBenchmark.family]))
        defer { stores.remove() }
        let (phone, watch) = (stores.phone, stores.watch)
        try phone.batchNow { batch in
            for i in 0..<100 { try batch.set("{\"value\":\(i)}", for: SyncBenchmark.family["k\(i)"]) }
        }
        let secret = PairingSecret.generate()
        let configuration = TCPConfiguration(secret: secret)
        let replication = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let clock = CountingClock()
        let phonePeer = SyncPeer(store: phone, configuration: replication, clock: clock, quietTickInterval: quietTickInterval)
        let watchPeer = SyncPeer(store: watch, configuration: replication, clock: clock, quietTickInterval: quietTickInterval)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let server = Task { await phonePeer.serve(listener) }
        let client = Task { await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        try await phonePeer.waitUntilIdle(timeout: .seconds(60))
        try await watchPeer.waitUntilIdle(timeout: .seconds(60))
        try await Task.sleep(for: settle)
        let (cpuBefore, wakeupsBefore, start) = (BenchClock.processCPUSeconds(), clock.count, ContinuousClock.now)
        try await Task.sleep(for: window)
        let elapsed = BenchClock.seconds(since: start)
        var measured = Measured()
        measured.cpuMillisecondsPerSecond = (BenchClock.processCPUSeconds() - cpuBefore) * 1_000 / elapsed
        measured.wakeupsPerSecond = Double(clock.count - wakeupsBefore) / elapsed
        client.cancel()
        await listener.close()
        server.cancel()
        _ = await (server.value, client.value)
        return measured
    }
}

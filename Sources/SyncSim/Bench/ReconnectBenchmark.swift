import CMalloc
import Foundation
import SyncEngine
import SyncTransport

/// What a phone keeps of each watch session that ended: a phone serves for
/// weeks while its watch comes and goes. Both in this process, over TCP on
/// 127.0.0.1: each round the watch connects, the phone writes one value, the
/// watch applies it, the watch hangs up, both sessions end. The figure is the
/// growth of the heap in use per round after a warm-up; its baseline, in the
/// same run, the same rounds of bare authenticated connections (no session).
public struct ReconnectBenchmark: Sendable {
    /// Rounds measured, after `warmUp` rounds not measured.
    public var rounds: Int
    public var warmUp: Int

    public init(quick: Bool) {
        rounds = quick ? 150 : 1_000
        warmUp = quick ? 30 : 100
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        progress("\(warmUp) + \(rounds) bare authenticated connections over TCP")
        let bare = try await heapGrowthPerRound(sessions: false)
        progress("\(warmUp) + \(rounds) watch sessions over TCP, each syncing one write")
        let sessions = try await heapGrowthPerRound(sessions: true)
        return [
            BenchFigure(name: "heap kept per watch session that ended (phone and watch, one process)", value: sessions,
                        unit: "bytes", baseline: bare, baselineName: "per bare connection bytes"),
        ]
    }

    /// Bytes the heap holds now, as the C library counts them (`mallinfo2`,
    /// `mstats`): unlike the resident size, not what the allocator keeps from
    /// freed blocks.
    static func heapInUse() -> Double {
        #if canImport(Darwin)
        return Double(mstats().bytes_used)
        #else
        let info = mallinfo2()
        return Double(info.uordblks + info.hblkhd)
        #endif
    }

    /// Longer than the longest timer a round leaves behind (`configuration` below).
    static let settle = Duration.seconds(1.5)

    func heapGrowthPerRound(sessions: Bool) async throws -> Double {
        let stores = try BenchStores(registry: KeyRegistry([SyncBenchmark.family]))
        defer { stores.remove() }
        let (phone, watch) = (stores.phone, stores.watch)
        let secret = PairingSecret.generate()
        // Short timers: a cancelled `Task.sleep` holds its memory until its deadline
        // (the heartbeat's 5 s, the dead-peer watchdog's 20 s, the handshake's 10 s by
        // default), which is not kept, so each measurement waits `settle` for them.
        let configuration = TCPConfiguration(secret: secret, heartbeatInterval: .milliseconds(100),
                                             deadPeerTimeout: .milliseconds(500), handshakeTimeout: .milliseconds(500))
        let replication = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phonePeer = SyncPeer(store: phone, configuration: replication, quietTickInterval: .milliseconds(200))
        let watchPeer = SyncPeer(store: watch, configuration: replication, quietTickInterval: .milliseconds(200))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let phoneEvents = phone.events()
        let watchChanges = watch.changes()
        let server = Task {
            if sessions {
                await phonePeer.serve(listener)
            } else {
                for await connection in listener.connections { await connection.close() }
            }
        }
        var phoneEventsLeft = phoneEvents.makeAsyncIterator()
        var watchChangesLeft = watchChanges.makeAsyncIterator()
        var before = 0.0
        for round in 0..<(warmUp + rounds) {
            if round == warmUp {
                try await Task.sleep(for: ReconnectBenchmark.settle)
                before = ReconnectBenchmark.heapInUse()
            }
            let connection = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: configuration)
            guard sessions else {
                await connection.close()
                continue
            }
            let session = Task { await watchPeer.run(over: connection) }
            try await phone.set("{\"round\":\(round)}", for: SyncBenchmark.family["reconnect"])
            while let change = await watchChangesLeft.next(), change.key != SyncBenchmark.family["reconnect"].name {}
            await connection.close()
            _ = await session.value
            while let event = await phoneEventsLeft.next() {
                if case .disconnected = event { break }
            }
        }
        try await Task.sleep(for: ReconnectBenchmark.settle)
        let growth = ReconnectBenchmark.heapInUse() - before
        await listener.close()
        server.cancel()
        await server.value
        return growth / Double(rounds)
    }
}

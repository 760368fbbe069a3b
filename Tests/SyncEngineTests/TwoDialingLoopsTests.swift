import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// Two `maintainConnection` loops of one store: the second waits while the
/// first dials or runs a session. Both dialed (the sessions of one store share
/// its replication lock), and the phone, seeing two sessions of one device,
/// ended each older one as the newer began: the two loops replaced each other's
/// session for ever.
@Suite(.timeLimit(.minutes(5))) struct TwoDialingLoopsTests {
    @Test func aSecondLoopOfAStoreWaitsForTheFirst() async throws {
        let pair = try Pair()
        let peers = try await ServeLifecycleTests.Peers(pair)
        let replaced = Mutex<[String]>([])
        let phoneEvents = pair.phone.events()
        let collector = Task {
            for await event in phoneEvents {
                if case .disconnected(let reason) = event, reason.contains("replaced") { replaced.withLock { $0.append(reason) } }
            }
        }
        let server = Task { await peers.phone.serve(peers.listener) }
        let dial: @Sendable () async -> Void = {
            await peers.watch.maintainConnection(host: "127.0.0.1", port: peers.listener.port, configuration: peers.tcp)
        }
        let waits = pair.watch.timedWaits.subscribe()
        let firstLoop = Task { await dial() }
        try await pair.watch.set(1, for: TestKeys.steps)
        try await eventually(pair.phone, "the first loop's session") { try pair.phone.storedValue(for: TestKeys.steps) == 1 }

        let secondLoop = Task { await dial() }
        let waited = await Result {
            try await first(of: waits, "the second loop to wait for the first") {
                if case .replicationLock = $0 { true } else { false }
            }
        }
        firstLoop.cancel()
        _ = await firstLoop.value
        try await pair.watch.set(2, for: TestKeys.steps)
        let synced = await Result {
            try await eventually(pair.phone, "the second loop's session") { try pair.phone.storedValue(for: TestKeys.steps) == 2 }
        }
        secondLoop.cancel()
        await peers.listener.close()
        try await withDeadline("dialing and serving to end") { _ = await (secondLoop.value, server.value) }
        collector.cancel()
        #expect(replaced.withLock { $0 }.isEmpty, "the phone replaced a session of the watch: \(replaced.withLock { $0 })")
        _ = try waited.get()
        try synced.get()
    }
}

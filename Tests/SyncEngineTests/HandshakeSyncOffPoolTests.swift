import Dispatch
import Foundation
@testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// A live session's handshake puts what its receipt vouches for on stable
/// storage (an `fsync` of the WAL) off Swift concurrency's cooperative pool.
@Suite(.timeLimit(.minutes(5))) struct HandshakeSyncOffPoolTests {
    /// More watches than the pool has threads reconnect, each with a commit
    /// since its last sync, and each held inside that sync (as an `fsync` of
    /// seconds on a loaded disk holds it): another task still runs, and once
    /// the syncs go on every session is established. Before, each handshake
    /// synced on a thread of the pool, and the pool ran nothing else.
    @Test func handshakesHeldInTheirSyncLeaveTheCooperativePoolFree() async throws {
        let sessions = ProcessInfo.processInfo.activeProcessorCount + 1
        var pairs: [Pair] = []
        for _ in 0..<sessions {
            let pair = try Pair()
            // A first session: the watch receives a change from the phone (its receipt vouches for it from then on).
            try await withConnectedPeers(pair, over: .memory) { phone, _ in
                try await pair.phone.set(1, for: TestKeys.steps)
                try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
                try await phone.waitUntilIdle(timeout: waitLimit)
            }
            // A commit since: the next handshake's sync has work to do.
            try pair.watch.setNow(["offline"], for: TestKeys.tags)
            pairs.append(pair)
        }
        let hold = CallHold(count: sessions)
        hold.releaseAtTheLatest(after: 60)
        for pair in pairs { pair.watch.database.setWALSyncHook { hold.hold() } }

        let (running, closers, _) = SessionLoopOffPoolTests.runPeers(of: pairs)

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(sessions) handshakes held in their WAL sync kept every other task from running: they block the cooperative pool")

        // Once the syncs go on, each session carries the watch's offline change to the phone.
        for pair in pairs {
            try await eventually(pair.phone, "the watch's offline tags on the phone") {
                try pair.phone.storedValue(for: TestKeys.tags) == ["offline"]
            }
        }
        for connection in closers { await connection.close() }
        try await withDeadline("the sessions to end") { for task in running { _ = await task.value } }
    }
}

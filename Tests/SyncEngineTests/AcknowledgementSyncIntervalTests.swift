import Foundation
import Synchronization
@_spi(Testing) @testable import SyncEngine
import SyncTransport
import Testing

/// A live session syncs its WAL for acknowledgements at most once per
/// `ReplicationConfiguration.acknowledgementSyncInterval`: a stream of single
/// writes costs the receiver one fsync per interval, not one per write, and
/// what it sees is not delayed.
@Suite(.timeLimit(.minutes(2))) struct AcknowledgementSyncIntervalTests {
    @Test func theFirstSyncAndOneAfterAQuietSpellStartAtOnce() {
        var spacing = SyncSpacing(interval: .milliseconds(10))
        let start = ContinuousClock.now
        #expect(spacing.wait(now: start) == nil)
        spacing.started(at: start)
        // Within the interval: wait for its end.
        #expect(spacing.wait(now: start + .milliseconds(3)) == start + .milliseconds(10))
        // At its end and after a quiet spell: at once.
        #expect(spacing.wait(now: start + .milliseconds(10)) == nil)
        #expect(spacing.wait(now: start + .seconds(5)) == nil)
        // Zero (or less, taken as zero) never waits.
        var unspaced = SyncSpacing(interval: .milliseconds(-1))
        unspaced.started(at: start)
        #expect(unspaced.interval == .zero && unspaced.wait(now: start) == nil)
    }

    @Test func aNegativeIntervalIsTakenAsZero() {
        var configuration = ReplicationConfiguration()
        #expect(configuration.acknowledgementSyncInterval == .milliseconds(1))
        configuration.acknowledgementSyncInterval = .milliseconds(-5)
        #expect(configuration.acknowledgementSyncInterval == .zero)
    }

    /// Twenty single writes on the phone, each made once the watch sees the
    /// one before (an app writing samples one by one): the watch synced its
    /// WAL for about every one of them. With an interval longer than the
    /// test, the acknowledgements wait until half the window's worth of them
    /// do (8 of 16), and sync together: two or three syncs. Every write is
    /// visible at once all the same, and the phone's window never fills.
    @Test(arguments: LinkKind.allCases)
    func singleWritesThatKeepArrivingShareTheWatchsSyncs(over kind: LinkKind) async throws {
        let pair = try Pair()
        try await withIdlePeersSyncingHourly(pair, over: kind) { _, _ in
            let syncsBefore = pair.watch.walSyncCount
            try await writeOneAtATime(pair, count: 20) { sample throws in
                #expect(try pair.watch.storedValue(for: TestKeys.steps) == sample)
            }
            let syncs = pair.watch.walSyncCount - syncsBefore
            #expect(syncs >= 1 && syncs <= 3, "the watch synced its WAL \(syncs) times for 20 writes")
        }
    }

    /// The end of an interval starts the waiting sync from its timer: the
    /// session loop, which may be applying the next batch, is not woken for
    /// it. For the second write the watch's loop takes two turns, its frame
    /// and the phone's caught-up notice that follows the acknowledgement;
    /// none for the spaced sync that sends the acknowledgement (three before).
    @Test(arguments: LinkKind.allCases)
    func theIntervalsEndDoesNotWakeTheSessionLoop(over kind: LinkKind) async throws {
        let pair = try Pair()
        try await withConnectedPeers(pair, over: kind, configure: { $0.acknowledgementSyncInterval = .milliseconds(500) }) { phone, watch in
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await watch.waitUntilIdle(timeout: .seconds(30))
            let seen = pair.watch.changes(for: TestKeys.steps)
            try pair.phone.setNow(1, for: TestKeys.steps)
            _ = try await first(of: seen, "the watch to see write 1")
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await watch.waitUntilIdle(timeout: .seconds(30))
            let syncs = pair.watch.walSyncCount, turns = watch.sessionLoopTurns
            let start = ContinuousClock.now
            try pair.phone.setNow(2, for: TestKeys.steps)
            _ = try await first(of: seen, "the watch to see write 2")
            let spaced = ContinuousClock.now - start < .milliseconds(400)
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await watch.waitUntilIdle(timeout: .seconds(30))
            #expect(pair.watch.walSyncCount == syncs + 1, "one sync for the second write")
            // (On a machine so slow that the interval ended before the frame arrived, the sync ran at once.)
            if spaced { #expect(watch.sessionLoopTurns - turns == 2, "the watch's loop turns: the second write's frame and the notice") }
        }
    }

    /// Acknowledgements still waiting for the interval when the session ends
    /// are synced then: the watch's commits (its cursor among them) reach
    /// stable storage as they did when each sync ran at once.
    @Test(arguments: LinkKind.allCases)
    func whatWaitsForTheIntervalIsSyncedWhenTheSessionEnds(over kind: LinkKind) async throws {
        let pair = try Pair()
        let syncsAtEnd = Mutex(0)
        try await withIdlePeersSyncingHourly(pair, over: kind) { phone, _ in
            let seen = pair.watch.changes(for: TestKeys.steps)
            // The first write is acknowledged (after its sync, which starts the interval); the
            // second's acknowledgement waits for the interval's end, with no sync under way.
            try pair.phone.setNow(1, for: TestKeys.steps)
            _ = try await first(of: seen, "the watch to see write 1")
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try pair.phone.setNow(2, for: TestKeys.steps)
            _ = try await first(of: seen, "the watch to see write 2")
            syncsAtEnd.withLock { $0 = pair.watch.walSyncCount }
            #expect(try pair.phone.pendingSummary().total == 1, "the second write's acknowledgement waits for the interval")
        }
        #expect(pair.watch.walSyncCount > syncsAtEnd.withLock { $0 })
    }
}

/// `withConnectedPeers` with acknowledgements synced at most once an hour
/// (or once half a window of them waits), `body` running once both peers are idle.
func withIdlePeersSyncingHourly(_ pair: Pair, over kind: LinkKind,
                                _ body: (SyncPeer, SyncPeer) async throws -> Void) async throws {
    try await withConnectedPeers(pair, over: kind, configure: { $0.acknowledgementSyncInterval = .seconds(3_600) }) { phone, watch in
        try await phone.waitUntilIdle(timeout: .seconds(30))
        try await watch.waitUntilIdle(timeout: .seconds(30))
        try await body(phone, watch)
    }
}

/// `count` single writes of `TestKeys.steps` on the phone (1, 2, …), each
/// made once the watch has seen the one before, as an app writing samples
/// one by one; `afterEach` runs once the watch has seen each.
func writeOneAtATime(_ pair: Pair, count: Int, afterEach: (Int) throws -> Void = { _ in }) async throws {
    let seen = pair.watch.changes(for: TestKeys.steps)
    for sample in 1...count {
        try pair.phone.setNow(sample, for: TestKeys.steps)
        _ = try await first(of: seen, "the watch to see write \(sample)")
        try afterEach(sample)
    }
}

import Foundation
@_spi(Testing) @testable import SyncEngine
import SyncTransport
import Testing

/// A phone records its peer's cursor once nothing more is in flight, at most
/// once a second while acknowledgements keep coming, and when the session
/// ends (`ReplicationEndpoint.defersCursorRecord`, set by `SyncPeer`), where it
/// committed it once per acknowledgement.
@Suite(.timeLimit(.minutes(2))) struct CursorRecordTests {
    /// Three writes in three batches, in flight together: the first two
    /// acknowledgements move the session's cursor and commit nothing; the
    /// third, with nothing left in flight, records it.
    @Test func aPhonesCursorIsRecordedOnceNothingIsInFlight() throws {
        let pair = try Pair()
        let link = Self.link(pair)
        let writes = try Self.batchesInFlight(pair, link, count: 3)
        let recorded = try Self.phoneCursor(pair)
        let commits = pair.phone.database.commitCount
        for ack in writes.acks.dropLast().joined() { _ = link.a.receive(ack, now: link.now) }
        #expect(pair.phone.database.commitCount == commits)
        #expect(try Self.phoneCursor(pair) == recorded)
        #expect(link.a.unrecordedCursor != nil)
        for ack in writes.acks.last! { _ = link.a.receive(ack, now: link.now) }
        #expect(pair.phone.database.commitCount == commits + 1)
        #expect(try Self.phoneCursor(pair) == (try SQLiteReplicationPort(pair.phone).streamPosition()))
        #expect(link.a.unrecordedCursor == nil && link.a.isIdle && link.a.failure == nil)
    }

    /// While batches stay in flight, a tick records the cursor once a second
    /// has passed since it was last recorded; the end of the session records it too.
    @Test func aTickPastTheIntervalAndTheSessionsEndRecordIt() throws {
        let pair = try Pair()
        let link = Self.link(pair)
        let writes = try Self.batchesInFlight(pair, link, count: 3)
        for ack in writes.acks[0] { _ = link.a.receive(ack, now: link.now) }
        let deferred = try #require(link.a.unrecordedCursor)
        #expect(try Self.phoneCursor(pair) < deferred)
        pair.phoneClock.advance(by: ReplicationEndpoint.cursorRecordInterval - 1)
        _ = link.a.tick(now: link.now)
        #expect(try Self.phoneCursor(pair) < deferred)
        pair.phoneClock.advance(by: 1)
        _ = link.a.tick(now: link.now)
        #expect(try Self.phoneCursor(pair) == deferred && link.a.unrecordedCursor == nil)
        // The next acknowledgement leaves it in the session again; the session's end records it.
        for ack in writes.acks[1] { _ = link.a.receive(ack, now: link.now) }
        let second = try #require(link.a.unrecordedCursor)
        link.a.connectionLost()
        #expect(try Self.phoneCursor(pair) == second)
    }

    /// Twenty single writes on the phone, each made once the watch sees the
    /// one before, over `SyncPeer`: the phone committed each write and, on
    /// its acknowledgement, the cursor (40 commits); now the cursor only
    /// when nothing is in flight, at most once per group of acknowledgements
    /// the watch sends together (its syncs, spaced here so that they are few).
    @Test(arguments: LinkKind.allCases)
    func singleWritesCostThePhoneNoCursorCommitEach(over kind: LinkKind) async throws {
        let pair = try Pair()
        try await withIdlePeersSyncingHourly(pair, over: kind) { _, _ in
            let commits = pair.phone.database.commitCount
            try await writeOneAtATime(pair, count: 20)
            let phoneCommits = pair.phone.database.commitCount - commits
            #expect(phoneCommits >= 20 && phoneCommits <= 24, "the phone committed \(phoneCommits) times for 20 writes")
        }
    }

    // MARK: helpers

    /// A phone (a) that defers its cursor record and a watch (b), step by
    /// step, connected; each commit goes at once (no burst coalescing).
    static func link(_ pair: Pair) -> Link {
        var configuration = ReplicationConfiguration(pairingEpoch: "cursor-record")
        configuration.burstCoalescing = nil
        let phone = ReplicationEndpoint(store: pair.phone, configuration: configuration)
        phone.defersCursorRecord = true
        let link = Link(endpoints: phone, ReplicationEndpoint(store: pair.watch, configuration: configuration), now: 1_000)
        link.connect()
        link.settle()
        return link
    }

    /// `count` writes on the phone, each pumped in a batch of its own and
    /// applied by the watch; the watch's answers to each (its acknowledgements) not delivered yet.
    static func batchesInFlight(_ pair: Pair, _ link: Link, count: Int) throws -> (acks: [[Frame]], Void) {
        var acks: [[Frame]] = []
        for i in 0..<count {
            try pair.phone.setNow(i, for: TestKeys.daily["k\(i)"])
            let batch = link.a.pump(now: link.now)
            #expect(batch.count == 1)
            acks.append(batch.flatMap { link.b.receive($0, now: link.now) })
        }
        return (acks, ())
    }

    static func phoneCursor(_ pair: Pair) throws -> Int64 {
        try pair.phone.peerRecords().first { $0.node == pair.watch.nodeID }?.cursor ?? -1
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// What a session passes over of the stream (the changes that came from its
/// own peer) costs neither a read nor a transaction of its own: the apply
/// that took them moves the peer's cursor past them (`ReplicationPort.apply`'s
/// `passingOver`), and a pump with nothing after its read position reads nothing.
@Suite(.timeLimit(.minutes(2))) struct PassOverTests {
    /// One write on the phone: the watch commits once (the apply, with its
    /// cursor for the phone), where it committed the cursor in a second
    /// transaction after reading the stream; its own writes still go.
    @Test func aReplicatedWriteCostsTheWatchOneCommit() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        let watchPort = SQLiteReplicationPort(pair.watch)
        for sample in 1...5 {
            let before = pair.watch.database.commitCount
            try await pair.phone.set(sample, for: TestKeys.steps)
            link.settle()
            #expect(try pair.watch.storedValue(for: TestKeys.steps) == sample)
            #expect(pair.watch.database.commitCount - before == 1)
            let cursor = try pair.watch.peerRecords().first { $0.node == pair.phone.nodeID }?.cursor
            #expect(cursor == (try watchPort.streamPosition()))
        }
        #expect(link.a.failure == nil && link.b.failure == nil)
        // The cursor passed over only what the phone sent: the watch's own write goes to the phone.
        try await pair.watch.set(42, for: TestKeys.steps)
        link.settle()
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 42)
        #expect(link.a.isIdle && link.b.isIdle)
    }

    /// Over the in-memory port, which counts its stream reads: a write on the
    /// phone is read once (by the pump the write wakes), not again after its
    /// acknowledgement; the watch reads nothing for it. (Nobody listens for
    /// progress here: counting a round's batches reads the stream too.)
    @Test func aReplicatedWriteIsReadOnceOnThePhoneAndNotOnTheWatch() throws {
        let registry = try KeyRegistry(TestKeys.all)
        let phone = InMemoryReplicationPort(node: 0x11, role: .phone, registry: registry, clock: ManualClock())
        let watch = InMemoryReplicationPort(node: 0x22, role: .watch, registry: registry, clock: ManualClock())
        let configuration = ReplicationConfiguration(pairingEpoch: "pass-over")
        let link = Link(endpoints: ReplicationEndpoint(port: phone, reporter: RecordingReporter(keepsEvents: false), configuration: configuration),
                        ReplicationEndpoint(port: watch, reporter: RecordingReporter(keepsEvents: false), configuration: configuration), now: 1_000)
        link.connect()
        link.settle()
        for sample in 1...5 {
            let (phoneReads, watchReads) = (phone.streamReads, watch.streamReads)
            try phone.write(TestKeys.steps.name, Array("\(sample)".utf8))
            link.run(link.a.localChange(now: link.now, at: .now), [])
            #expect(watch.state(TestKeys.steps.name)?.value == Array("\(sample)".utf8))
            #expect(phone.streamReads - phoneReads == 1)
            #expect(watch.streamReads - watchReads == 0)
        }
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(link.a.isIdle && link.b.isIdle)
    }
}

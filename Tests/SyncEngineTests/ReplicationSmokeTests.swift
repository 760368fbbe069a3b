import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

@Suite struct ReplicationSmokeTests {
    @Test func basicTwoWaySync() async throws {
        let pair = try Pair()
        try await pair.phone.set(42, for: TestKeys.steps)
        try await pair.watch.set(["run"], for: TestKeys.tags)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try await pair.watch.get(TestKeys.steps) == 42)
        #expect(try await pair.phone.get(TestKeys.tags) == ["run"])
        #expect(link.a.isIdle && link.b.isIdle)
        try await pair.watch.set(7, for: TestKeys.steps)
        link.settle()
        #expect(try await pair.phone.get(TestKeys.steps) == 7)
    }

    @Test func overAsyncInMemoryConnection() async throws {
        let pair = try Pair()
        try await pair.phone.set(5, for: TestKeys.steps)
        let (c1, c2) = InMemoryConnection.makePair()
        let config = ReplicationConfiguration(pairingEpoch: "t")
        let phonePeer = SyncPeer(store: pair.phone, configuration: config)
        let watchPeer = SyncPeer(store: pair.watch, configuration: config)
        let changes = pair.watch.changes(for: TestKeys.steps)
        let t1 = Task { await phonePeer.run(over: c1) }
        let t2 = Task { await watchPeer.run(over: c2) }
        try await first(of: changes, "the phone's steps to arrive on the watch") { $0.origin == .remote }
        #expect(try await pair.watch.get(TestKeys.steps) == 5)
        try await phonePeer.waitUntilIdle(timeout: waitLimit)
        await c1.close()
        try await withDeadline("both peers to stop after the connection closed") { _ = await (t1.value, t2.value) }
    }
}

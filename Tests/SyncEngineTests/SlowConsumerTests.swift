import Foundation
@testable import SyncEngine
import Testing

/// `changes()`, `events()` and `peerEvents()` keep the newest 10,000 elements
/// a consumer has not read: one that fell further behind (a `batchNow` of
/// 12,000 writes) lost the oldest without knowing. Now it is told how many.
@Suite(.timeLimit(.minutes(5))) struct SlowConsumerTests {
    private let family = KeyFamily<Int>("n", default: 0, policy: .never)

    @Test func aChangesConsumerThatFellBehindLearnsHowManyItMissed() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: KeyRegistry([family]))
        let all = store.changes(matching: .all)
        let some = store.changes(matching: .key("n:11999"))
        try store.batchNow { batch in
            for i in 0..<12_000 { try batch.set(i, for: family["\(i)"]) }
        }
        try store.setNow(1, for: family["after"])
        store.close()  // the streams end after what they hold
        var received: [StoreChange] = []
        for await change in all { received.append(change) }
        #expect(received.count == 10_000)
        #expect(received.first?.key == "n:2001" && received.first?.missedBefore == 2_001, "\(String(describing: received.first))")
        #expect(received.dropFirst().allSatisfy { $0.missedBefore == 0 })
        #expect(received.last?.key == "n:after")
        // A consumer that kept up (its filter let few through) missed nothing.
        var matching: [StoreChange] = []
        for await change in some { matching.append(change) }
        #expect(matching.map(\.key) == ["n:11999"] && matching.allSatisfy { $0.missedBefore == 0 })
    }

    @Test func anEventsConsumerThatFellBehindGetsAnEventSayingHowManyItMissed() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: KeyRegistry([family]))
        let events = store.events()
        let peerEvents = store.peerEvents()
        for i in 0..<10_005 { store.emit(.received(entries: i, applied: 0), peer: 7) }
        store.close()
        var received: [SyncEvent] = []
        for await event in events { received.append(event) }
        #expect(received.count == 10_001)
        #expect(received.first == .eventsMissed(count: 5), "\(String(describing: received.first))")
        #expect(received.dropFirst().first == .received(entries: 5, applied: 0))
        var perPeer: [PeerEvent] = []
        for await event in peerEvents { perPeer.append(event) }
        #expect(perPeer.first == PeerEvent(peer: nil, event: .eventsMissed(count: 5)))
        #expect(perPeer.count == 10_001 && perPeer.last == PeerEvent(peer: 7, event: .received(entries: 10_004, applied: 0)))
    }

    /// An in-memory store's `changes()` says so too.
    @Test func anInMemoryStoresChangesSaySo() async throws {
        let store = InMemoryStore(role: .phone, registry: try KeyRegistry([family]))
        let all = store.changes(matching: .all)
        try store.batchNow { batch in
            for i in 0..<10_003 { try batch.set(i, for: family["\(i)"]) }
        }
        store.close()
        var received: [StoreChange] = []
        for await change in all { received.append(change) }
        #expect(received.count == 10_000 && received.first?.missedBefore == 3)
    }
}

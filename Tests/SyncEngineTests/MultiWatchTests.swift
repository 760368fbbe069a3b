import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// A phone and several watches, each watch with its own session with the
/// phone (in-memory connections), the phone serving them at once.
final class Household: Sendable {
    let folder = TempFolder()
    let phone: SyncStore
    let watches: [SyncStore]
    let phonePeer: SyncPeer
    let watchPeers: [SyncPeer]
    let config = ReplicationConfiguration(pairingEpoch: "household")

    init(watches count: Int, keys: [any KeyDeclaration] = TestKeys.all) throws {
        let registry = try KeyRegistry(keys)
        let folder = self.folder
        let config = self.config
        phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry,
                              options: StoreOptions(encryption: .keyFile(path: folder.file("phone.key"))))
        let watches = try (0..<count).map { i in
            try SyncStore(path: folder.file("watch\(i).sqlite"), role: .watch, registry: registry,
                          options: StoreOptions(encryption: .keyFile(path: folder.file("watch\(i).key"))))
        }
        self.watches = watches
        phonePeer = SyncPeer(store: phone, configuration: config, tickInterval: .milliseconds(50))
        watchPeers = watches.map { SyncPeer(store: $0, configuration: config, tickInterval: .milliseconds(50)) }
    }

    /// Connects watch `i`: both ends run their session until `Link.close()`.
    func connect(_ i: Int) -> Link {
        let (a, b) = InMemoryConnection.makePair()
        return Link(a: a, tasks: [Task { await self.phonePeer.run(over: a) }, Task { await self.watchPeers[i].run(over: b) }])
    }

    struct Link {
        let a: InMemoryConnection
        let tasks: [Task<String, Never>]

        func close() async throws {
            await a.close()
            for task in tasks { _ = try await withDeadline("a session to end") { await task.value } }
        }
    }

    /// Waits until the phone and the connected watches have nothing left to send.
    func settle(_ connected: [Int]) async throws {
        for _ in 0..<2 {  // what one side applies the other may have to forward
            try await phonePeer.waitUntilIdle(timeout: waitLimit)
            for i in connected { try await watchPeers[i].waitUntilIdle(timeout: waitLimit) }
        }
    }
}

@Suite(.timeLimit(.minutes(5))) struct MultiWatchTests {
    /// Two watches connected at once converge through the phone: a watch's
    /// change reaches the other watch, and is never sent back to its writer.
    @Test func twoWatchesConvergeThroughThePhone() async throws {
        let home = try Household(watches: 2)
        let links = [home.connect(0), home.connect(1)]
        try await home.settle([0, 1])
        #expect(Set(home.phonePeer.connectedPeers) == Set(home.watches.map(\.nodeID)))

        try await home.watches[0].set(41, for: TestKeys.steps)
        try await eventually(home.watches[1], "watch 1 to get watch 0's write") {
            try home.watches[1].storedValue(for: TestKeys.steps) == 41
        }
        try await home.settle([0, 1])
        #expect(try home.phone.storedValue(for: TestKeys.steps) == 41)
        // Watch 0 wrote it: the phone does not send it back (nothing received beyond its own session's traffic).
        #expect(home.watches[0].syncCounters.entriesReceived == 0)
        #expect(try home.phone.pendingSummary().total == 0)

        try await home.watches[1].set(["b"], for: TestKeys.tags)
        try await eventually(home.watches[0], "watch 0 to get watch 1's write") {
            try home.watches[0].storedValue(for: TestKeys.tags) == ["b"]
        }
        for link in links { try await link.close() }
    }

    /// Switching watches: each resumes from its own cursor, so a watch that
    /// missed 10 changes gets exactly those 10, not everything.
    @Test func switchingWatchesResumesEachFromItsCursor() async throws {
        let home = try Household(watches: 2)
        try home.phone.batchNow { batch in
            for i in 0..<200 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
        }
        for i in 0..<2 {  // both watches take the baseline, one after the other
            let link = home.connect(i)
            try await home.settle([i])
            try await link.close()
            #expect(try home.watches[i].allEntryInfo().count == 200)
        }
        // Wearing watch 0 for a while: 10 changes.
        let link0 = home.connect(0)
        for i in 0..<10 { try await home.phone.set(1_000 + i, for: TestKeys.daily["d\(i)"]) }
        try await home.settle([0])
        try await link0.close()
        // Back to watch 1: it gets those 10 and nothing else.
        let before = home.watches[1].syncCounters.entriesReceived
        let link1 = home.connect(1)
        try await home.settle([1])
        try await link1.close()
        #expect(home.watches[1].syncCounters.entriesReceived - before == 10)
        #expect(try await home.watches[1].get(TestKeys.daily["d3"]) == 1_003)
        #expect(try home.phone.pendingSummary(for: home.watches[1].nodeID).total == 0)
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0)
    }

    /// A watch's watchOnly keys never leave it; phoneWithWatchSync reaches every watch.
    @Test func availabilityHoldsWithSeveralWatches() async throws {
        let home = try Household(watches: 2)
        let links = [home.connect(0), home.connect(1)]
        try await home.watches[0].set("face-0", for: TestKeys.watchFace)
        try await home.phone.set("imperial", for: TestKeys.units)
        try await home.settle([0, 1])
        for watch in home.watches {
            try await eventually(watch, "units to reach every watch") { try watch.storedValue(for: TestKeys.units) == "imperial" }
        }
        #expect(try home.phone.storedValue(for: TestKeys.watchFace) == nil)
        #expect(try home.watches[1].storedValue(for: TestKeys.watchFace) == nil)
        #expect(try home.watches[0].storedValue(for: TestKeys.watchFace) == "face-0")
        for link in links { try await link.close() }
    }

    /// Events that concern a peer say which one.
    @Test func peerEventsNameTheirWatch() async throws {
        let home = try Household(watches: 2)
        let events = home.phone.peerEvents()
        let links = [home.connect(0), home.connect(1)]
        var connected: Set<UInt32> = []
        while connected.count < 2 {
            let record = try await first(of: events, "the phone's connected events") {
                if case .connected = $0.event { true } else { false }
            }
            guard case .connected(let node, _) = record.event else { continue }
            #expect(record.peer == node)
            connected.insert(node)
        }
        #expect(connected == Set(home.watches.map(\.nodeID)))
        try await home.watches[1].set(5, for: TestKeys.steps)
        let received = try await first(of: events, "the phone's received event") {
            if case .received(_, let applied) = $0.event { applied > 0 } else { false }
        }
        #expect(received.peer == home.watches[1].nodeID)
        for link in links { try await link.close() }
    }
}

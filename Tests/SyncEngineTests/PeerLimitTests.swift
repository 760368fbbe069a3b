import Foundation
@testable import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// A store keeps a cursor row for at most `StoreOptions.maxKnownPeers`
/// peers: a paired peer that names a new node id in each hello (buggy or
/// hostile) is refused with `too-many-peers` once the store is full, live
/// or queued, and nothing is applied from it. A phone frees a place with
/// `forgetPeer(_:)` (or `peerHorizon`).
@Suite(.timeLimit(.minutes(5))) struct PeerLimitTests {
    /// A phone that keeps at most `limit` peers, and `watches` watches, each a store of its own.
    struct Stores {
        let folder = TempFolder()
        let phoneClock = ManualClock()
        let watchClock = ManualClock()
        let phone: SyncStore
        let watches: [SyncStore]

        init(limit: Int, watches count: Int) throws {
            let registry = try KeyRegistry(TestKeys.all)
            var options = StoreOptions(clock: phoneClock, encryption: .keyFile(path: folder.file("phone.key")))
            options.maxKnownPeers = limit
            phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry, options: options)
            let folder = self.folder, clock = watchClock
            watches = try (0..<count).map { i in
                try SyncStore(path: folder.file("watch\(i).sqlite"), role: .watch, registry: registry,
                              options: StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("watch\(i).key"))))
            }
        }
    }

    @Test func aNewWatchBeyondTheLimitIsRefusedUntilThePhoneForgetsOne() async throws {
        let stores = try Stores(limit: 2, watches: 3)
        let config = ReplicationConfiguration(pairingEpoch: "limit")
        let phonePeer = SyncPeer(store: stores.phone, configuration: config, tickInterval: .milliseconds(20))
        let watchPeers = stores.watches.map { SyncPeer(store: $0, configuration: config, tickInterval: .milliseconds(20)) }
        func connect(_ i: Int) -> (InMemoryConnection, [Task<String, Never>]) {
            let (a, b) = InMemoryConnection.makePair()
            return (a, [Task { await phonePeer.run(over: a) }, Task { await watchPeers[i].run(over: b) }])
        }
        let phoneErrors = stores.phone.events()

        try await stores.phone.set(7, for: TestKeys.steps)
        let first = [connect(0), connect(1)]
        for i in 0..<2 {
            try await eventually(stores.watches[i], "watch \(i) to get the phone's write") { try stores.watches[i].value(for: TestKeys.steps) == 7 }
        }

        // A third node: refused on both ends, and it gets nothing.
        let thirdEvents = stores.watches[2].events()
        let (_, refusedTasks) = connect(2)
        let phoneReason = try await withDeadline("the phone to end the third watch's session") { await refusedTasks[0].value }
        _ = try await withDeadline("the third watch's session to end") { await refusedTasks[1].value }
        #expect(phoneReason.contains("too-many-peers"), "\(phoneReason)")
        try await expectRefusal(in: thirdEvents, "the third watch")
        #expect(try stores.watches[2].storedValue(for: TestKeys.steps) == nil)
        let refusal = try await withDeadline("the phone's error event") { () -> SyncError? in
            for await event in phoneErrors { if case .error(let error) = event, error.code == .tooManyPeers { return error } }
            return nil
        }
        #expect(refusal?.message.contains("maxKnownPeers = 2") == true, "\(String(describing: refusal))")
        #expect(try stores.phone.knownPeers() == stores.watches[0..<2].map(\.nodeID).sorted())

        // A watch with a session running cannot be forgotten; once it has ended, it can.
        #expect(throws: SyncError.self) { try stores.phone.forgetPeer(stores.watches[0].nodeID) }
        await first[0].0.close()
        for task in first[0].1 { _ = try await withDeadline("watch 0's session to end") { await task.value } }
        #expect(try stores.phone.forgetPeer(stores.watches[0].nodeID))
        #expect(try !stores.phone.forgetPeer(0xDEAD))
        #expect(try stores.phone.forgottenPeers() == [stores.watches[0].nodeID])
        do {
            try stores.watches[1].forgetPeer(stores.phone.nodeID)
            Issue.record("a watch forgot its phone")
        } catch let error as SyncError {
            #expect(error.code == .invalidConfiguration, "\(error)")
        }

        // Now the third watch takes the freed place and syncs; the first, back, is the one refused.
        let (third, thirdTasks) = connect(2)
        try await eventually(stores.watches[2], "the third watch to get the phone's write") { try stores.watches[2].value(for: TestKeys.steps) == 7 }
        let firstEvents = stores.watches[0].events()
        let (_, againTasks) = connect(0)
        for task in againTasks { _ = try await withDeadline("the forgotten watch's session to end") { await task.value } }
        try await expectRefusal(in: firstEvents, "the forgotten watch")

        await third.close()
        await first[1].0.close()
        for task in thirdTasks + first[1].1 { _ = try await withDeadline("the sessions to end") { await task.value } }
    }

    /// Waits for `events` to report the phone's refusal (`too-many-peers`).
    func expectRefusal(in events: AsyncStream<SyncEvent>, _ who: String) async throws {
        let refusal = try await withDeadline("\(who) to be told it is refused") { () -> SyncError? in
            for await event in events { if case .error(let error) = event, error.code == .tooManyPeers { return error } }
            return nil
        }
        #expect(refusal?.message.contains("the peer ended the session") == true, "\(String(describing: refusal))")
    }

    /// Queued messages from a node the full store refuses are set aside with
    /// the error (kept in `refused/`), nothing of them applied; the watch
    /// sends its changes again once a place is free.
    @Test func queuedMessagesFromANodeBeyondTheLimitAreSetAsideAndComeAgain() async throws {
        let stores = try Stores(limit: 1, watches: 1)
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let folder = TempFolder()
        let phone = SyncPeer(store: stores.phone, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watch = SyncPeer(store: stores.watches[0], configuration: config)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        // The phone's one place is taken by another watch.
        let other: UInt32 = 0x0BAD_CAFE
        try stores.phone.recordPeer(node: other, role: .watch, epoch: secret.epoch)

        try await stores.watches[0].set(12, for: TestKeys.steps)
        #expect(try watch.deliverQueued(through: watchBox).messagesPosted == 2)  // its node renewal notice, its batch
        let refused = try phone.deliverQueued(through: phoneBox)
        #expect(refused.refused.map(\.code) == [.tooManyPeers], "\(refused.refused)")
        #expect(refused.entriesApplied == 0)
        #expect(try stores.phone.storedValue(for: TestKeys.steps) == nil)
        #expect(try stores.phone.knownPeers() == [other])
        let kept = try FileManager.default.contentsOfDirectory(atPath: phoneBox.inboxPath + "/refused")
        #expect(kept.contains { $0.hasSuffix(".msg") }, "\(kept)")

        // The watch reads the refusal and waits; the phone forgets the other watch; after the
        // pause the watch posts again, and this time its change is applied.
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == [.tooManyPeers])
        #expect(try stores.phone.forgetPeer(other))
        stores.watchClock.advance(by: 61_000)
        #expect(try watch.deliverQueued(through: watchBox).messagesPosted >= 1)
        let applied = try phone.deliverQueued(through: phoneBox)
        #expect(applied.refused.isEmpty, "\(applied.refused)")
        #expect(try stores.phone.storedValue(for: TestKeys.steps) == 12)
        #expect(try stores.phone.knownPeers() == [stores.watches[0].nodeID])
    }

    /// A message set aside (here: from a node beyond the limit) is answered by a
    /// refusal posted back; the round's report counts it among the messages it
    /// posted, as it counts every other refusal (it said 0, though the outbox grew).
    @Test func aRefusalPostedForAMessageSetAsideIsCountedAsPosted() async throws {
        let stores = try Stores(limit: 1, watches: 1)
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let folder = TempFolder()
        let phone = SyncPeer(store: stores.phone, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watch = SyncPeer(store: stores.watches[0], configuration: config)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        try stores.phone.recordPeer(node: 0x0BAD_CAFE, role: .watch, epoch: "another pairing")
        try await stores.watches[0].set(12, for: TestKeys.steps)
        _ = try watch.deliverQueued(through: watchBox)
        let before = try phoneBox.outgoingCount()
        let events = stores.phone.events()
        let round = try phone.deliverQueued(through: phoneBox)
        #expect(round.refused.map(\.code) == [.tooManyPeers], "\(round.refused)")
        let posted = try phoneBox.outgoingCount() - before
        #expect(posted >= 1)
        #expect(round.messagesPosted == posted, "\(round)")
        // The queued event says the same.
        var said: Int?
        for await event in events {
            if case .queuedDelivery(_, _, let count, _) = event { said = count; break }
        }
        #expect(said == posted)
    }

    /// A phone that refuses a watch's queued messages for its limit posts that
    /// watch none of its own changes, as a live session with it ends before
    /// anything goes: the watch's acknowledgements would be refused too, and
    /// the phone posted its whole store again each time the watch had read it.
    /// Once the phone forgets a watch, the refused one is baselined.
    @Test func aPhoneRefusingAWatchForTheLimitPostsItNothingUntilAPlaceIsFree() async throws {
        let stores = try Stores(limit: 1, watches: 1)
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let folder = TempFolder()
        let phone = SyncPeer(store: stores.phone, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watch = SyncPeer(store: stores.watches[0], configuration: config)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        let other: UInt32 = 0x0BAD_CAFE
        try stores.phone.recordPeer(node: other, role: .watch, epoch: "another pairing")
        try await stores.phone.set(7, for: TestKeys.steps)
        try await stores.watches[0].set(Data([1, 2, 3]), for: TestKeys.blob)
        var entriesPosted = 0
        for _ in 0..<4 {
            _ = try watch.deliverQueued(through: watchBox)
            let round = try phone.deliverQueued(through: phoneBox)
            entriesPosted += round.entriesPosted
        }
        #expect(entriesPosted == 0, "the phone posted \(entriesPosted) entries to a watch it refuses")
        #expect(try stores.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try stores.phone.knownPeers() == [other])

        // A place is free: the watch's messages are taken, and it is baselined.
        #expect(try stores.phone.forgetPeer(other))
        stores.watchClock.advance(by: 61_000)
        for _ in 0..<3 {
            _ = try watch.deliverQueued(through: watchBox)
            _ = try phone.deliverQueued(through: phoneBox)
        }
        #expect(try stores.watches[0].storedValue(for: TestKeys.steps) == 7)
        #expect(try stores.phone.storedValue(for: TestKeys.blob) == Data([1, 2, 3]))
    }

    /// `syncsim node`: `status` lists the peers the store keeps, `forget-peer NODE` forgets one,
    /// `renew-node-id` gives the store a new node id.
    @Test func theNodeConsoleListsAndForgetsPeers() async throws {
        let stores = try Stores(limit: 2, watches: 0)
        try stores.phone.recordPeer(node: 0xABC, role: .watch, epoch: "node")
        let console = NodeConsole(store: stores.phone, peer: SyncPeer(store: stores.phone, configuration: ReplicationConfiguration(pairingEpoch: "node")),
                                  output: JSONLineWriter())
        #expect(try console.status()["peers"] as? [String] == ["abc"])
        let details = try #require(try console.status()["peerDetails"] as? [[String: Any]])
        #expect(details.count == 1)
        #expect(details.first?["node"] as? String == "abc" && details.first?["role"] as? String == "watch", "\(details)")
        #expect(details.first?["pairing"] as? String == "node" && details.first?["connected"] as? Bool == false, "\(details)")
        #expect(details.first?["lastSeen"] as? Int64 == stores.phoneClock.nowMilliseconds(), "\(details)")
        let bad = await console.execute("forget-peer not-hex")
        #expect(bad["ok"] as? Bool == false && (bad["error"] as? String)?.contains("hex") == true, "\(bad)")
        let forgotten = await console.execute("forget-peer abc")
        #expect(forgotten["ok"] as? Bool == true && forgotten["forgotten"] as? Bool == true && forgotten["peer"] as? String == "abc", "\(forgotten)")
        let again = await console.execute("forget-peer ABC")
        #expect(again["ok"] as? Bool == true && again["forgotten"] as? Bool == false, "\(again)")
        #expect(try console.status()["peers"] as? [String] == [])
        #expect((try console.status()["peerDetails"] as? [[String: Any]])?.isEmpty == true)

        let old = stores.phone.nodeID
        let renewed = await console.execute("renew-node-id")
        #expect(renewed["ok"] as? Bool == true && renewed["old"] as? String == String(old, radix: 16), "\(renewed)")
        #expect(renewed["node"] as? String == String(stores.phone.nodeID, radix: 16) && stores.phone.nodeID != old, "\(renewed)")
        #expect(try console.status()["node"] as? String == String(stores.phone.nodeID, radix: 16))
    }

    /// Over TCP as in memory: a watch the full phone refuses is told why.
    @Test func overTCPTheRefusedWatchIsToldWhy() async throws {
        let stores = try Stores(limit: 1, watches: 1)
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        try stores.phone.recordPeer(node: 0x0BAD_CAFE, role: .watch, epoch: secret.epoch)
        try await stores.phone.set(7, for: TestKeys.steps)
        let phone = SyncPeer(store: stores.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: stores.watches[0], configuration: config, tickInterval: .milliseconds(50))
        let events = stores.watches[0].events()
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let server = Task { await phone.serve(listener) }
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        let outcome = await Result { try await expectRefusal(in: events, "the watch") }
        client.cancel()
        await listener.close()
        server.cancel()
        try await withDeadline("the server and the client to stop") { _ = await (server.value, client.value) }
        try outcome.get()
        #expect(try stores.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try stores.phone.knownPeers() == [0x0BAD_CAFE])
    }
}

import Foundation
@testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// SyncPeer live over TCP while connected, queued through the mailbox while
/// not, with reachability that apps observe.
@Suite(.timeLimit(.minutes(5))) struct LiveOrQueuedTests {
    /// A phone and a watch of one pairing (50 ms ticks), their mailboxes in one
    /// folder, and a listener on 127.0.0.1 for the phone.
    struct LiveOrQueued {
        let pair: Pair
        let folder = TempFolder()
        let phone: SyncPeer
        let watch: SyncPeer
        let phoneBox: Mailbox
        let watchBox: Mailbox
        let tcp: TCPConfiguration
        let listener: TCPListener

        init() async throws {
            pair = try Pair()
            let secret = PairingSecret.generate()
            let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
            phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
            watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
            phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
            watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
            tcp = TCPConfiguration(secret: secret)
            listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        }
    }

    @Test func disconnectQueuesReconnectGoesLiveAndNothingIsLost() async throws {
        let setup = try await LiveOrQueued()
        let (pair, phone, watch, phoneBox, watchBox, tcp, listener) =
            (setup.pair, setup.phone, setup.watch, setup.phoneBox, setup.watchBox, setup.tcp, setup.listener)
        let watchReachability = watch.reachabilityChanges()
        let serving = Task { await phone.serve(listener) }
        let phoneQueued = Task { await phone.runQueued(through: phoneBox, pollInterval: .milliseconds(50)) }
        let watchQueued = Task { await watch.runQueued(through: watchBox, pollInterval: .milliseconds(50)) }
        #expect(!watch.isReachable)
        var dialing = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }

        // Live: the change goes over TCP, nothing through the mailbox.
        try await reachability(of: [watch, phone], becomes: true, "the watch to be reachable")
        try await pair.phone.set(1, for: TestKeys.steps)
        try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
        try await phone.waitUntilIdle(timeout: waitLimit)
        // Rounds of queued delivery while the live session is up post nothing.
        for _ in 0..<3 { #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 0) }
        #expect(postedSequence(phoneBox) == nil)

        // The watch goes out of reach: the phone's changes are queued and still arrive.
        dialing.cancel()
        _ = await dialing.value
        try await reachability(of: [watch, phone], becomes: false, "both sides to see the link down")
        try await pair.phone.set(2, for: TestKeys.steps)
        try await pair.phone.set("imperial", for: TestKeys.units)
        try await pair.watch.set(["from the watch"], for: TestKeys.tags)
        try await eventually(pair.watch, "the queued changes on the watch") {
            try pair.watch.storedValue(for: TestKeys.steps) == 2 && pair.watch.storedValue(for: TestKeys.units) == "imperial"
        }
        try await eventually(pair.phone, "the watch's queued tags on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == ["from the watch"] }
        // The values are visible before the round that applied them accepts the message (a queuedDelivery event follows it).
        try await until(pair.watch.events(), "the watch to accept the phone's queued message") { watchBox.acceptedSequence > 0 }
        #expect(!watch.isReachable)
        // Each acknowledgement read from the mailbox is a queuedDelivery event of the store whose cursor it moves.
        try await until(pair.phone.events(), "the watch's queued acknowledgement to move the phone's cursor") {
            (try? pair.phone.pendingSummary(for: pair.watch.nodeID).total) == 0
        }
        try await until(pair.watch.events(), "the phone's queued acknowledgement to move the watch's cursor") {
            (try? pair.watch.pendingSummary(for: pair.phone.nodeID).total) == 0
        }

        // Back in reach: live again, and the change goes over TCP.
        dialing = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        try await reachability(of: [watch, phone], becomes: true, "the watch to be reachable again")
        let postedBefore = postedSequence(phoneBox)
        #expect(postedBefore != nil)
        try await pair.phone.set(3, for: TestKeys.steps)
        try await eventually(pair.watch, "steps 3 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 3 }
        try await phone.waitUntilIdle(timeout: waitLimit)
        for _ in 0..<3 { #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 0) }
        #expect(try phoneBox.outgoingCount() == 0)
        #expect(postedSequence(phoneBox) == postedBefore)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)

        dialing.cancel()
        _ = await dialing.value
        let seen = try await withDeadline("the watch's reachability changes") {
            var seen: [Bool] = []
            for await reachable in watchReachability {
                seen.append(reachable)
                if seen.count == 4 { break }
            }
            return seen
        }
        #expect(seen == [true, false, true, false])
        phoneQueued.cancel()
        watchQueued.cancel()
        serving.cancel()
        await listener.close()
        _ = await phoneQueued.value
        _ = await watchQueued.value
        _ = await serving.value
    }

    /// Rounds of queued delivery that move nothing grow apart (2 ms doubling
    /// up to 40 ms here); what the peer posts then is still read.
    @Test func queuedRoundsAtRestGrowApart() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        let waits = pair.phone.timedWaits.subscribe()
        let phoneQueued = Task { await phone.runQueued(through: phoneBox, pollInterval: .milliseconds(2), quietPollInterval: .milliseconds(40)) }
        let outcome = await Result {
            let phoneEvents = pair.phone.events()
            try await pair.phone.set(1, for: TestKeys.steps)
            try await until(phoneEvents, "the phone to post its change") { postedSequence(phoneBox) != nil }
            try watch.deliverQueued(through: watchBox)   // reads, applies, acknowledges
            #expect(try pair.watch.storedValue(for: TestKeys.steps) == 1)
            try await until(pair.phone.events(), "the watch's acknowledgement to move the phone's cursor") {
                (try? pair.phone.pendingSummary(for: pair.watch.nodeID).total) == 0
            }
            let rounds = try await timedWaits(in: waits, until: .milliseconds(40), "the empty rounds to grow 40 ms apart") {
                if case .queuedRound(let wait) = $0 { wait } else { nil }
            }
            #expect(rounds.suffix(5) == [4, 8, 16, 32, 40].map { .milliseconds($0) }, "rounds at rest: \(rounds)")
            // The watch posts: the phone's timer reads it.
            try await pair.watch.set(["queued"], for: TestKeys.tags)
            try watch.deliverQueued(through: watchBox)
            try await eventually(pair.phone, "the watch's posted change on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == ["queued"] }
        }
        phoneQueued.cancel()
        _ = await phoneQueued.value
        try outcome.get()
    }

    /// While a live session with the mailbox's peer is up, a local write starts
    /// no queued round: the session sends it, and the round would post nothing
    /// (it listed the spools and read the store's stream for each write: a burst
    /// of 2,000 writes in `syncsim node` took a quarter more of the phone's CPU
    /// with `--mailbox` than without). The timer's rounds go on.
    @Test func localWritesWhileLiveStartNoQueuedRound() async throws {
        let setup = try await LiveOrQueued()
        let (pair, phone, watch, phoneBox, tcp, listener) = (setup.pair, setup.phone, setup.watch, setup.phoneBox, setup.tcp, setup.listener)
        let serving = Task { await phone.serve(listener) }
        let dialing = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        try await reachability(of: [phone, watch], becomes: true, "the pair to be live")
        let waits = pair.phone.timedWaits.subscribe()
        let phoneQueued = Task { await phone.runQueued(through: phoneBox, pollInterval: .seconds(3_600), quietPollInterval: .seconds(3_600)) }
        for steps in 1...20 {
            try await pair.phone.set(steps, for: TestKeys.steps)
            try await eventually(pair.watch, "write \(steps) on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == steps }
        }
        phoneQueued.cancel()
        _ = await phoneQueued.value
        dialing.cancel()
        await listener.close()
        serving.cancel()
        _ = await (serving.value, dialing.value)
        pair.phone.close()  // ends `waits`
        var rounds = 0
        for await wait in waits { if case .queuedRound = wait { rounds += 1 } }
        #expect(rounds == 1, "the first round only, not one per write")
        #expect(postedSequence(phoneBox) == nil, "nothing posted while live")
    }
}

/// The next sequence `mailbox` will post (its `sender.state`), nil before its first message.
func postedSequence(_ mailbox: Mailbox) -> String? {
    try? String(contentsOfFile: mailbox.outboxPath + "/sender.state", encoding: .utf8)
}

/// Returns once every peer's `isReachable` is `expected`, waiting for its
/// reachability changes (subscribed before it is checked), never polling.
func reachability(of peers: [SyncPeer], becomes expected: Bool, _ what: String) async throws {
    for peer in peers {
        let changes = peer.reachabilityChanges()
        if peer.isReachable == expected { continue }
        _ = try await first(of: changes, what) { $0 == expected }
    }
}

/// Returns once `condition` holds: checked now, then after each element of
/// `stream` (subscribe before the check, so nothing slips between).
func until<T: Sendable>(_ stream: AsyncStream<T>, _ what: String, _ condition: @escaping @Sendable () -> Bool) async throws {
    if condition() { return }
    _ = try await first(of: stream, what) { _ in condition() }
}

import Foundation
@testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// SyncPeer live over TCP while connected, queued through the mailbox while
/// not, with reachability that apps observe.
@Suite(.timeLimit(.minutes(2))) struct LiveOrQueuedTests {
    @Test func disconnectQueuesReconnectGoesLiveAndNothingIsLost() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let reachability = watch.reachabilityChanges()
        let seen = Mutex<[Bool]>([])
        let recorder = Task {
            for await reachable in reachability { seen.withLock { $0.append(reachable) } }
        }
        let serving = Task { await phone.serve(listener) }
        let phoneQueued = Task { await phone.runQueued(through: phoneBox, pollInterval: .milliseconds(50)) }
        let watchQueued = Task { await watch.runQueued(through: watchBox, pollInterval: .milliseconds(50)) }
        #expect(!watch.isReachable)
        var dialing = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }

        // Live: the change goes over TCP, nothing through the mailbox.
        try await waitFor("the watch to be reachable") { watch.isReachable && phone.isReachable }
        try await pair.phone.set(1, for: TestKeys.steps)
        try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
        try await phone.waitUntilIdle(timeout: waitLimit)
        // Rounds of queued delivery while the live session is up post nothing.
        for _ in 0..<3 { #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 0) }
        #expect(postedSequence(phoneBox) == nil)

        // The watch goes out of reach: the phone's changes are queued and still arrive.
        dialing.cancel()
        _ = await dialing.value
        try await waitFor("both sides to see the link down") { !watch.isReachable && !phone.isReachable }
        try await pair.phone.set(2, for: TestKeys.steps)
        try await pair.phone.set("imperial", for: TestKeys.units)
        try await pair.watch.set(["from the watch"], for: TestKeys.tags)
        try await eventually(pair.watch, "the queued changes on the watch") {
            try pair.watch.storedValue(for: TestKeys.steps) == 2 && pair.watch.storedValue(for: TestKeys.units) == "imperial"
        }
        try await eventually(pair.phone, "the watch's queued tags on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == ["from the watch"] }
        #expect(watchBox.acceptedSequence > 0)
        #expect(!watch.isReachable)
        try await waitFor("the queued acknowledgements to move the cursors") {
            (try? pair.phone.pendingSummary(for: pair.watch.nodeID).total) == 0
                && (try? pair.watch.pendingSummary(for: pair.phone.nodeID).total) == 0
        }

        // Back in reach: live again, and the change goes over TCP.
        dialing = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        try await waitFor("the watch to be reachable again") { watch.isReachable && phone.isReachable }
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
        try await waitFor("the last reachability change") { seen.withLock { $0 } == [true, false, true, false] }
        phoneQueued.cancel()
        watchQueued.cancel()
        serving.cancel()
        await listener.close()
        _ = await phoneQueued.value
        _ = await watchQueued.value
        _ = await serving.value
        recorder.cancel()
    }
}

/// The next sequence `mailbox` will post (its `sender.state`), nil before its first message.
func postedSequence(_ mailbox: Mailbox) -> String? {
    try? String(contentsOfFile: mailbox.outboxPath + "/sender.state", encoding: .utf8)
}

/// Polls `condition` every 20 ms until it holds; throws after `waitLimit`.
func waitFor(_ what: String, _ condition: @Sendable () throws -> Bool) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + waitLimit
    while clock.now < deadline {
        if try condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record("timed out waiting for \(what)")
    throw SyncError(.timeout, "timed out waiting for \(what)")
}

import Foundation
@testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// Closing a store ends what runs on it: its streams, its sessions, the
/// dialing and serving loops and queued delivery. Before, a watch whose store
/// was closed kept redialing, and each new session failed on the closed store
/// after the phone had sent it a batch again.
@Suite(.timeLimit(.minutes(5))) struct StoreCloseTests {
    @Test func streamsAskedForAfterTheStoreClosedEndAtOnce() async throws {
        let pair = try Pair()
        pair.watch.close()
        try await withDeadline("the streams of a closed store to end") {
            for await _ in pair.watch.events() {}
            for await _ in pair.watch.changes() {}
            for await _ in pair.watch.peerEvents() {}
        }
    }

    @Test func aSessionOnAClosedStoreEndsAtOnce() async throws {
        let pair = try Pair()
        let peer = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        pair.watch.close()
        let (a, b) = InMemoryConnection.makePair()
        let reason = try await withDeadline("a session on a closed store to end") { await peer.run(over: a) }
        #expect(reason.contains("was closed"), "\(reason)")
        try await withDeadline("the other end to see the connection close") { for try await _ in b.inbound {} }
    }

    /// A phone serving and a watch dialing it over TCP, each in a task of its own.
    struct ServingAndDialing {
        let phone: SyncPeer
        let watch: SyncPeer
        let listener: TCPListener
        let server: Task<Void, Never>
        let client: Task<Void, Never>

        init(_ pair: Pair) async throws {
            let secret = PairingSecret.generate()
            let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
            let (phone, watch) = (SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50)),
                                  SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50)))
            let tcp = TCPConfiguration(secret: secret)
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
            (self.phone, self.watch, self.listener) = (phone, watch, listener)
            server = Task { await phone.serve(listener) }
            client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        }

        func stop() async {
            client.cancel()
            await listener.close()
            server.cancel()
            _ = await (server.value, client.value)
        }
    }

    @Test func closingTheWatchsStoreEndsItsSessionAndItsDialing() async throws {
        let pair = try Pair()
        let phoneEvents = pair.phone.events()
        let peers = try await ServingAndDialing(pair)
        try await pair.phone.set(5, for: TestKeys.steps)
        try await peers.watch.waitUntilIdle(timeout: waitLimit)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)

        pair.watch.close()
        try await withDeadline("the watch to stop dialing once its store closed") { await peers.client.value }
        // The phone sees the connection close, not an error from a session on the closed store.
        try await withDeadline("the phone to see the watch go") {
            var seen: [SyncEvent] = []
            for await event in phoneEvents {
                seen.append(event)
                if case .disconnected = event { return seen }
            }
            return seen
        }.forEach { event in
            if case .error(let error) = event { Issue.record("the phone reported \(error)") }
        }
        #expect(!peers.watch.isConnected)
        await peers.stop()
    }

    @Test func closingThePhonesStoreEndsServingAndItsSessions() async throws {
        let pair = try Pair()
        let peers = try await ServingAndDialing(pair)
        try await pair.watch.set(5, for: TestKeys.steps)
        try await peers.phone.waitUntilIdle(timeout: waitLimit)

        pair.phone.close()
        try await withDeadline("serving to end once the phone's store closed") { await peers.server.value }
        #expect(!peers.phone.isConnected)
        await peers.stop()
    }

    @Test func queuedDeliveryEndsWhenTheStoreCloses() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let peer = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let mailbox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let rounds = pair.phone.timedWaits.subscribe()
        let queued = Task { await peer.runQueued(through: mailbox, pollInterval: .milliseconds(5)) }
        _ = try await first(of: rounds, "a first round of queued delivery") { _ in true }
        pair.phone.close()
        try await withDeadline("queued delivery to end once the store closed") { await queued.value }
    }
}

/// `waitUntilIdle` on a closed store: `.closed` at once, not `.timeout` at the end of its wait.
@Suite(.timeLimit(.minutes(5))) struct WaitOnAClosedStoreTests {
    @Test func waitingForIdleThrowsClosedWhenTheStoreCloses() async throws {
        let pair = try Pair()
        let peer = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let waiting = Task { try await peer.waitUntilIdle(timeout: .seconds(3_600)) }
        pair.watch.close()
        let outcome = try await withDeadline("the wait to end once the store closed") { await waiting.result }
        #expect(outcome.failureCode == .closed)
        let later = try await withDeadline("a wait on the closed store to end") { await Result { try await peer.waitUntilIdle(timeout: .seconds(3_600)) } }
        #expect(later.failureCode == .closed)
    }
}

/// A cancelled `waitUntilIdle` threw `.timeout` ("not idle after 3600 s"),
/// as if the hour had passed: the caller could not tell its own cancellation
/// from a peer that never caught up.
@Suite(.timeLimit(.minutes(5))) struct CancelledIdleWaitTests {
    @Test func aCancelledWaitThrowsCancellationErrorNotTimeout() async throws {
        let pair = try Pair()
        let peer = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let waiting = Task { try await peer.waitUntilIdle(timeout: .seconds(3_600)) }
        waiting.cancel()
        let outcome = try await withDeadline("the cancelled wait to end") { await waiting.result }
        guard case .failure(let error) = outcome else {
            Issue.record("a cancelled wait with no session returned as if idle")
            return
        }
        #expect(error is CancellationError, "\(error)")
        // The store is untouched: a later wait still runs (and times out, with no session).
        let later = try await withDeadline("an uncancelled wait to time out") { await Result { try await peer.waitUntilIdle(timeout: .milliseconds(1)) } }
        #expect(later.failureCode == .timeout)
    }
}

private extension Result where Failure == any Error {
    var failureCode: SyncError.Code? {
        if case .failure(let error) = self { return (error as? SyncError)?.code }
        return nil
    }
}

import Logging
import ServiceLifecycle
@testable import SyncEngine
import SyncTransport
import Testing

/// SyncPeer as swift-service-lifecycle services: the phone serving its
/// listener, the watch dialing; graceful shutdown ends both and returns.
@Suite(.timeLimit(.minutes(5))) struct SyncPeerServiceTests {
    let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    @Test func servingAndDialingRunInAServiceGroupAndShutDownGracefully() async throws {
        let pair = try Pair()
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: tcp)
        let port = listener.port
        let group = ServiceGroup(services: [phone.serving(listener), watch.dialing(host: "127.0.0.1", port: port, configuration: tcp)],
                                 logger: quiet)
        let running = Task { try await group.run() }

        try await pair.phone.set(7, for: TestKeys.steps)
        try await eventually(pair.watch, "the phone's steps on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 7 }
        #expect(phone.isConnected && watch.isConnected)

        let disconnected = pair.watch.events()
        await group.triggerGracefulShutdown()
        try await withDeadline("the service group to return after graceful shutdown") { try await running.value }
        // The sessions ended on both sides and nothing listens any more.
        #expect(!phone.isConnected && !watch.isConnected)
        _ = try await first(of: disconnected, "the watch's disconnected event") { if case .disconnected = $0 { true } else { false } }
        await #expect(throws: (any Error).self) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: tcp)
        }
    }

    /// Closing the phone's store ends its serving service, as documented: it
    /// stops accepting and `run()` returns. The sessions ended, but the
    /// listener went on accepting, so `run()` never returned.
    @Test func closingTheStoreEndsTheServingService() async throws {
        let pair = try Pair()
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: tcp)
        let port = listener.port
        let serving = Task { try await phone.serving(listener).run() }
        let dialing = Task { try await watch.dialing(host: "127.0.0.1", port: port, configuration: tcp).run() }
        try await pair.phone.set(7, for: TestKeys.steps)
        try await eventually(pair.watch, "the phone's steps on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 7 }

        pair.phone.close()
        try await withDeadline("the serving service to return once its store is closed") { try await serving.value }
        await #expect(throws: (any Error).self) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: tcp)
        }
        dialing.cancel()
        _ = try await withDeadline("the dialing service to stop") { try await dialing.value }
    }

    /// A failed dial's error event keeps the transport's code: a listener of
    /// another pairing is `authentication-failed` (it was `not-connected`,
    /// like a peer that is not there at all).
    @Test func aFailedDialKeepsTheTransportCode() async throws {
        let pair = try Pair()
        let phoneSecret = PairingSecret.generate()
        let otherSecret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: phoneSecret))
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: otherSecret.epoch))
        let events = pair.watch.events()
        let dialing = Task {
            await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: otherSecret))
        }
        let failure = try await first(of: events, "the failed dial's error event") { event -> Bool in
            if case .error = event { true } else { false }
        }
        dialing.cancel()
        await listener.close()
        _ = try await withDeadline("the dialer to stop") { await dialing.value }
        guard case .error(let error) = failure else { Issue.record("not an error event: \(failure)"); return }
        #expect(error.code == .authenticationFailed, "\(error)")

        // A port where nothing listens any more: not-connected, as documented.
        let mapped = SyncError(TransportError(.connectFailed, "refused"), context: "dial")
        #expect(mapped.code == .notConnected && mapped.message == "dial: refused")
    }
}

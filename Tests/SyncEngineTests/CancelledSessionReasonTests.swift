import Logging
import ServiceLifecycle
@testable import SyncEngine
import SyncTransport
import Testing

/// A session ended by its own side stopping (graceful shutdown, its task
/// cancelled, a `syncsim node` quitting) says so in its `disconnected`
/// reason. It said "the peer closed the connection" (the inbound stream ends
/// when its reader is cancelled) or a bare "closed": a log, or a node's
/// quitting line, blamed the peer for what this side did.
@Suite(.timeLimit(.minutes(5))) struct CancelledSessionReasonTests {
    @Test func gracefulShutdownIsTheReasonOfBothSides() async throws {
        let pair = try Pair()
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: tcp)
        let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let phoneGroup = ServiceGroup(services: [phone.serving(listener)], logger: quiet)
        let watchGroup = ServiceGroup(services: [watch.dialing(host: "127.0.0.1", port: listener.port, configuration: tcp)], logger: quiet)
        let phoneRunning = Task { try await phoneGroup.run() }
        let watchRunning = Task { try await watchGroup.run() }
        try await pair.phone.set(7, for: TestKeys.steps)
        try await eventually(pair.watch, "the phone's steps on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 7 }

        // The watch stops: its reason is its own stopping; the phone's is not.
        let watchEvents = pair.watch.events()
        let phoneEvents = pair.phone.events()
        await watchGroup.triggerGracefulShutdown()
        try await withDeadline("the watch's group to return") { try await watchRunning.value }
        let watchReason = try await disconnectedReason(watchEvents, "the watch's disconnected event")
        #expect(watchReason == SyncPeer.cancelledReason, "\(watchReason)")
        let phoneReason = try await disconnectedReason(phoneEvents, "the phone's disconnected event")
        // (The peer closed it, or a send found it closed.)
        #expect(phoneReason != SyncPeer.cancelledReason, "\(phoneReason)")

        // The phone stops with a watch connected: its session's reason is its own stopping.
        let again = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        try await reachability(of: [phone], becomes: true, "the watch's second session")
        let phoneEnd = pair.phone.events()
        await phoneGroup.triggerGracefulShutdown()
        try await withDeadline("the phone's group to return") { try await phoneRunning.value }
        let stopped = try await disconnectedReason(phoneEnd, "the phone's second disconnected event")
        #expect(stopped == SyncPeer.cancelledReason, "\(stopped)")
        again.cancel()
        await again.value
    }

    /// The reason of the next `disconnected` event in `events`.
    private func disconnectedReason(_ events: AsyncStream<SyncEvent>, _ what: String) async throws -> String {
        let event = try await first(of: events, what) { if case .disconnected = $0 { true } else { false } }
        guard case .disconnected(let reason) = event else { return "" }
        return reason
    }
}

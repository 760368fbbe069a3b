import Logging
import ServiceLifecycle
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// The listener as a swift-service-lifecycle `Service`: `init` binds and
/// starts nothing, `run()` accepts until graceful shutdown, and returns
/// having closed what it owned.
@Suite(.timeLimit(.minutes(5))) struct TCPListenerServiceTests {
    let secret = PairingSecret.generate()
    let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    @Test func runsInAServiceGroupAndShutsDownGracefully() async throws {
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let group = ServiceGroup(services: [listener], logger: quiet)
        let running = Task { try await group.run() }

        // It accepts and authenticates while the group runs.
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "the connection accepted by the running service")
        #expect(accepted.pairingEpoch == secret.epoch)

        // A peer in the middle of its handshake when the shutdown comes.
        let port = listener.port
        let (challenged, challenge) = AsyncStream.makeStream(of: Void.self)
        let stalled = Task {
            try await withRawClient(port: port) { session -> [UInt8] in
                try await session.send(FrameCodec().encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame))
                _ = try await session.nextEnvelope()  // the challenge; no proof follows
                challenge.yield()
                return await session.readToEnd()
            }
        }
        // The shutdown comes once the handshake is under way (not before the peer has even connected).
        try await first(of: challenged, "the stalled peer to receive the challenge")

        await group.triggerGracefulShutdown()
        try await withDeadline("the service group to return after graceful shutdown") { try await running.value }
        // The handshake under way was closed, the streams finished, nothing is accepted any more.
        _ = try await withDeadline("the stalled handshake to be closed") { try await stalled.value }
        #expect(try await all(of: listener.connections, "the connections to end").isEmpty)
        _ = try await all(of: listener.rejectionReports, "the rejection reports to end")
        await expectCode(.connectFailed) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: testConfiguration(secret))
        }
        // The connection established before the shutdown is its owner's: still open.
        try await dialer.send(Frame(type: 1, payload: [7]))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [7])])
        await dialer.close()
        await accepted.close()
        await listener.close()  // after run() returned: nothing left to do, returns at once
    }

    @Test func cancellingRunStopsTheListener() async throws {
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let running = Task { try await listener.run() }
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "a connection while running")
        running.cancel()
        try await withDeadline("run() to return after cancellation") { try await running.value }
        #expect(try await all(of: listener.connections, "the connections to end").isEmpty)
        await dialer.close()
        await accepted.close()
    }

    @Test func aListenerThatNeverRanClosesCleanly() async throws {
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        // A peer connects while nobody accepts: the kernel queues it, the listener owns it.
        let port = listener.port
        let queued = Task { try? await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: testConfiguration(secret)) }
        await listener.close()
        #expect(try await all(of: listener.connections, "the connections to end").isEmpty)
        let connection = try await withDeadline("the queued dial to end") { await queued.value }
        #expect(connection == nil, "nothing was accepted")
        // run() after close() returns at once.
        try await withDeadline("run() on a closed listener") { try await listener.run() }
    }

    /// A listener made by `bind` already accepts; in a service group, `run()`
    /// waits for it, and graceful shutdown closes it.
    @Test func aBoundListenerJoinsAServiceGroup() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let group = ServiceGroup(services: [listener], logger: quiet)
        let running = Task { try await group.run() }
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "the connection of the bound listener")
        await group.triggerGracefulShutdown()
        try await withDeadline("the service group to return") { try await running.value }
        #expect(try await all(of: listener.connections, "the connections to end").isEmpty)
        await dialer.close()
        await accepted.close()
    }
}

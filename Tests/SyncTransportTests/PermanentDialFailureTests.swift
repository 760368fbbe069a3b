import Synchronization
import Testing
@testable import SyncTransport

/// `ReconnectingDialer` retried a dial the peer will never accept (another
/// pairing's listener, no wire version in common) for ever, logging each
/// failure. Such a dial now ends the sequence, with the reason in
/// `permanentFailure` and an error log; a transient failure still backs off
/// and retries. Each dialer's waits are recorded, not slept, and the last
/// allowed one stops it, so every test ends by itself even when the dialer
/// does not stop.
@Suite struct PermanentDialFailureTests {
    /// Records the dialer's waits; the `allowed`-th ends the dialer as a
    /// cancelled wait does, so a dialer that retries for ever still stops.
    final class BoundedSleeps: Sendable {
        let allowed: Int
        private let delays = Mutex<[Duration]>([])
        init(allowed: Int) { self.allowed = allowed }
        var recorded: [Duration] { delays.withLock { $0 } }
        var sleep: @Sendable (Duration) async throws -> Void {
            { [self] delay in
                let count = delays.withLock { delays -> Int in
                    delays.append(delay)
                    return delays.count
                }
                if count >= allowed { throw CancellationError() }
            }
        }
    }

    static let policy = ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(4), jitter: 0)

    /// Dials `port` on 127.0.0.1 with `configuration` until the dialer's sequence ends.
    static func dialUntilItEnds(port: Int, configuration: TCPConfiguration, sleeps: BoundedSleeps) async throws -> ReconnectingDialer {
        let dialer = ReconnectingDialer(policy: policy, seed: 1, logger: configuration.logger, sleep: sleeps.sleep) {
            try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: configuration)
        }
        let connection = try await nextConnection(of: dialer)
        #expect(connection == nil, "the dialer connected")
        return dialer
    }

    @Test func aListenerOfAnotherPairingStopsTheDialer() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(.generate()))
        let logs = LogCapture()
        let sleeps = BoundedSleeps(allowed: 5)
        let dialer = try await Self.dialUntilItEnds(
            port: listener.port, configuration: testConfiguration(.generate(), logs: logs), sleeps: sleeps)
        await listener.close()
        #expect(dialer.attempts == 1, "\(dialer.attempts) dials of a listener that will never accept")
        #expect(sleeps.recorded.isEmpty)
        let failure = try #require(dialer.permanentFailure)
        #expect(failure.code == .authenticationFailed, "\(failure)")
        #expect(logs.all.contains { $0.contains("stopped dialing") && $0.contains("authentication-failed") }, "\(logs.all)")
        // The sequence stays ended: no dial after it.
        #expect(try await nextConnection(of: dialer) == nil)
        #expect(dialer.attempts == 1)
    }

    @Test func noWireVersionInCommonStopsTheDialer() async throws {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sleeps = BoundedSleeps(allowed: 5)
        let newer = testConfiguration(secret) { $0.wireVersions = 2...3 }
        let dialer = try await Self.dialUntilItEnds(port: listener.port, configuration: newer, sleeps: sleeps)
        await listener.close()
        #expect(dialer.attempts == 1)
        #expect(dialer.permanentFailure?.code == .unsupportedVersion, "\(String(describing: dialer.permanentFailure))")
    }

    /// Nothing listening (connection refused) may pass: retried with backoff, as before.
    @Test func aRefusedConnectionIsStillRetried() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(.generate()))
        let port = listener.port
        await listener.close()
        let sleeps = BoundedSleeps(allowed: 3)
        let dialer = try await Self.dialUntilItEnds(port: port, configuration: testConfiguration(.generate()), sleeps: sleeps)
        #expect(dialer.attempts == 3)
        #expect(sleeps.recorded == [.milliseconds(1), .milliseconds(2), .milliseconds(4)])
        #expect(dialer.permanentFailure == nil)
    }

    @Test func onlyRefusalsNoRetryMendsArePermanent() {
        let permanent = Set(TransportError.Code.all.filter(\.isPermanent))
        #expect(permanent == [.authenticationFailed, .unsupportedVersion])
    }
}

import Synchronization
import Testing
@testable import SyncTransport

/// `ReconnectingDialer` retried a dial the peer will never accept (another
/// pairing's listener, no wire version in common) with the growing delays of
/// a transient failure, logging a warning for each. Such a refusal is now
/// dialed again only after the policy's longest wait, with one error log per
/// run of refusals; a transient failure still backs off as before. Each
/// dialer's waits are recorded, not slept, and the last allowed one stops
/// it, so every test ends by itself.
@Suite struct PermanentDialFailureTests {
    /// Records the dialer's waits; the `allowed`-th ends the dialer as a
    /// cancelled wait does.
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

    @Test func aListenerOfAnotherPairingIsDialedAgainOnlyAfterTheLongestWait() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(.generate()))
        let logs = LogCapture()
        let sleeps = BoundedSleeps(allowed: 3)
        let dialer = try await Self.dialUntilItEnds(
            port: listener.port, configuration: testConfiguration(.generate(), logs: logs), sleeps: sleeps)
        await listener.close()
        #expect(dialer.attempts == 3)
        // Not 1, 2, 4 ms as for a dial nothing answered: the longest wait each time.
        #expect(sleeps.recorded == [.milliseconds(4), .milliseconds(4), .milliseconds(4)])
        #expect(dialer.permanentFailure?.code == .authenticationFailed, "\(String(describing: dialer.permanentFailure))")
        // The dialer's own log: one error for the run of refusals, no warning per dial.
        #expect(logs.all.filter { $0.hasPrefix("error the peer refused the dial") }.count == 1, "\(logs.all)")
        #expect(!logs.all.contains { $0.contains("dial attempt failed") }, "\(logs.all)")
    }

    @Test func noWireVersionInCommonIsDialedAgainOnlyAfterTheLongestWait() async throws {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sleeps = BoundedSleeps(allowed: 2)
        let newer = testConfiguration(secret) { $0.wireVersions = 2...3 }
        let dialer = try await Self.dialUntilItEnds(port: listener.port, configuration: newer, sleeps: sleeps)
        await listener.close()
        #expect(dialer.attempts == 2)
        #expect(sleeps.recorded == [.milliseconds(4), .milliseconds(4)])
        #expect(dialer.permanentFailure?.code == .unsupportedVersion, "\(String(describing: dialer.permanentFailure))")
    }

    /// The address answers with the right peer again (re-paired, or the right
    /// phone back): the next dial connects, and the refusal is forgotten.
    @Test func aRefusalIsForgottenOnceADialConnects() async throws {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sleeps = BoundedSleeps(allowed: 5)
        let dials = Mutex(0)
        let port = listener.port
        let dialer = ReconnectingDialer(policy: Self.policy, seed: 1, logger: testConfiguration(secret).logger, sleep: sleeps.sleep) {
            let dial = dials.withLock { dials -> Int in
                dials += 1
                return dials
            }
            if dial == 1 { throw TransportError(.authenticationFailed, "the peer holds another pairing") }
            return try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: testConfiguration(secret))
        }
        let connection = try #require(try await nextConnection(of: dialer))
        #expect(dialer.attempts == 2)
        #expect(sleeps.recorded == [.milliseconds(4)])
        #expect(dialer.permanentFailure == nil)
        await connection.close()
        await dialer.close()
        await listener.close()
    }

    /// Nothing listening (connection refused) may pass: retried with growing delays, as before.
    @Test func aRefusedConnectionBacksOffAsBefore() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(.generate()))
        let port = listener.port
        await listener.close()
        let sleeps = BoundedSleeps(allowed: 3)
        let dialer = try await Self.dialUntilItEnds(port: port, configuration: testConfiguration(.generate()), sleeps: sleeps)
        #expect(dialer.attempts == 3)
        #expect(sleeps.recorded == [.milliseconds(1), .milliseconds(2), .milliseconds(4)])
        #expect(dialer.permanentFailure == nil)
    }

    @Test func onlyRefusalsNoQuickRetryMendsArePermanent() {
        let permanent = Set(TransportError.Code.all.filter(\.isPermanent))
        #expect(permanent == [.authenticationFailed, .unsupportedVersion])
    }
}

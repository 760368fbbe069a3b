import Synchronization
import Testing
@testable import SyncTransport

/// Reconnect loops back off until a session stayed up for
/// `ReconnectPolicy.resetAfter`: a connection that is accepted, then dropped
/// or failed at once, counts as a failure.
@Suite(.timeLimit(.minutes(5))) struct ReconnectBackoffTests {
    let secret = PairingSecret.generate()

    @Test func backoffGrowsUntilASessionIsStable() {
        let policy = ReconnectPolicy(
            initialDelay: .milliseconds(100), maxDelay: .seconds(1), multiplier: 2, jitter: 0, resetAfter: .seconds(5))
        var backoff = ReconnectBackoff(policy: policy, seed: 1)
        var delays: [Duration] = []
        delays.append(backoff.dialFailed())
        delays.append(backoff.connectionEnded(after: .milliseconds(3)))  // accepted, dropped at once
        delays.append(backoff.connectionEnded(after: .seconds(4)))  // still too short
        delays.append(backoff.dialFailed())
        delays.append(backoff.dialFailed())
        #expect(delays == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1)])
        // A session that stayed up past resetAfter starts over.
        #expect(backoff.connectionEnded(after: .seconds(5)) == .milliseconds(100))
        #expect(backoff.connectionEnded(after: .zero) == .milliseconds(200))
        #expect(ReconnectPolicy().resetAfter == .seconds(5))
    }

    /// A policy without an initial delay still backs off: zero doubled is
    /// zero, and a reconnect loop (`maintainConnection(initialDelay: .zero)`)
    /// against a phone that refuses it redialed in a loop that never rested.
    @Test func aZeroInitialDelayStillBacksOff() {
        var backoff = ReconnectBackoff(policy: ReconnectPolicy(initialDelay: .zero, maxDelay: .seconds(1), jitter: 0), seed: 1)
        let delays = (0..<12).map { _ in backoff.dialFailed() }
        #expect(delays.first == .milliseconds(1))
        #expect(delays[5] == .milliseconds(32))
        #expect(delays.last == .seconds(1))
        var none = ReconnectBackoff(policy: ReconnectPolicy(initialDelay: .zero, maxDelay: .zero), seed: 1)
        #expect(none.dialFailed() > .zero)
        #expect(none.connectionEnded(after: .zero) > .zero)
    }

    /// A steep multiplier grows the delay to `maxDelay`, without a trap: the
    /// step past it was computed first (1 s times 1e30 is beyond `Duration`),
    /// and a reconnect loop with such a policy trapped at its second failure.
    @Test func aSteepMultiplierReachesTheLongestDelay() {
        var backoff = ReconnectBackoff(
            policy: ReconnectPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), multiplier: 1e30, jitter: 0), seed: 1)
        #expect(backoff.dialFailed() == .seconds(1))
        #expect(backoff.dialFailed() == .seconds(60))
        #expect(backoff.connectionEnded(after: .zero) == .seconds(60))
    }

    /// The delays `ReconnectingDialer` chose, recorded instead of slept.
    final class SleepRecorder: Sendable {
        private let delays = Mutex<[Duration]>([])
        var recorded: [Duration] { delays.withLock { $0 } }
        var sleep: @Sendable (Duration) async throws -> Void {
            { [self] delay in self.delays.withLock { $0.append(delay) } }
        }
    }

    @Test func dialerGrowsTheDelayWhenConnectionsEndAtOnce() async throws {
        let failuresLeft = Mutex(2)
        let recorder = SleepRecorder()
        let dialer = ReconnectingDialer(
            policy: ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(16), jitter: 0, resetAfter: .seconds(3_600)),
            seed: 1, sleep: recorder.sleep
        ) {
            if failuresLeft.withLock({ left -> Bool in defer { left -= 1 }; return left > 0 }) {
                throw TransportError(.connectFailed, "refused")
            }
            return InMemoryConnection.makePair().0
        }
        var iterator = dialer.makeAsyncIterator()
        for _ in 0..<5 { #expect(await iterator.next() != nil) }  // each dropped as soon as the next is asked for
        #expect(recorder.recorded == [.milliseconds(1), .milliseconds(2), .milliseconds(4), .milliseconds(8), .milliseconds(16), .milliseconds(16)])
        #expect(dialer.attempts == 7)
        await dialer.close()
        #expect(await iterator.next() == nil)
    }

    @Test func dialerStartsOverAfterAStableSession() async throws {
        let recorder = SleepRecorder()
        let dialer = ReconnectingDialer(
            policy: ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(16), jitter: 0, resetAfter: .zero),
            seed: 1, sleep: recorder.sleep
        ) {
            InMemoryConnection.makePair().0
        }
        var iterator = dialer.makeAsyncIterator()
        for _ in 0..<4 { #expect(await iterator.next() != nil) }
        #expect(recorder.recorded == [.milliseconds(1), .milliseconds(1), .milliseconds(1)])
        await dialer.close()
    }

    /// Over real TCP: a listener that accepts (the handshake succeeds) and
    /// drops every connection at once. Without backoff the dialer redials
    /// every `initialDelay` (10 ms: well over 100 dials in 2 s); with it,
    /// 10, 20, 40 … 640 ms, then 1 s: about 8.
    @Test func dialerBacksOffFromAListenerThatDropsEveryConnection() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let dropper = Task {
            for await connection in listener.connections { await connection.close() }
        }
        let dialer = ReconnectingDialer(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret),
            policy: ReconnectPolicy(initialDelay: .milliseconds(10), maxDelay: .seconds(1)))
        // The window opens at the first session (on a loaded machine the first
        // dial alone can take long); a slow machine only makes the count lower.
        var window: ContinuousClock.Instant?
        var sessions = 0
        for await connection in dialer {
            sessions += 1
            window = window ?? ContinuousClock.now + .seconds(2)
            _ = try await inboundEnd(of: connection)
            if let window, ContinuousClock.now >= window { break }
        }
        await dialer.close()
        await listener.close()
        _ = await dropper.value
        print("dialer against a dropping listener: \(dialer.attempts) dials in 2 s")
        #expect(sessions >= 1)
        #expect(dialer.attempts <= 20, "\(dialer.attempts) dials in 2 s: no backoff")
    }
    /// A dialer whose task was cancelled (the app or node stopping) ends
    /// without a word about backing off: it logged "the connection ended soon
    /// after it was established; backing off" with a retry delay as it stopped.
    @Test func aCancelledDialerStopsWithoutBackingOff() async throws {
        let logs = LogCapture()
        let recorder = SleepRecorder()
        let dialer = ReconnectingDialer(
            policy: ReconnectPolicy(initialDelay: .milliseconds(1), jitter: 0, resetAfter: .seconds(3_600)),
            seed: 1, logger: logs.logger, sleep: recorder.sleep
        ) { InMemoryConnection.makePair().0 }
        let next = await Task {
            var iterator = dialer.makeAsyncIterator()
            let first = await iterator.next()
            withUnsafeCurrentTask { $0?.cancel() }
            return (first != nil, await iterator.next() == nil)
        }.value
        #expect(next == (true, true))
        #expect(!logs.all.contains { $0.contains("backing off") }, "\(logs.all)")
        #expect(recorder.recorded.isEmpty, "no wait before a redial that will not come")
        #expect(dialer.attempts == 1)
        await dialer.close()
    }
}

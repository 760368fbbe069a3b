import Foundation
import Testing
@testable import SyncTransport

/// Durations given as "never" (`.seconds(Int64.max)`) in the transport's
/// settings: its timers trapped in the task sleep of the standard library ("Not enough bits"); they now
/// sleep for `Duration.longestSleep` (100 years). Each body runs in a child
/// process (an exit test): a trap fails that test instead of killing the run.
@Suite(.timeLimit(.minutes(3))) struct TimerExtremesTests {
    /// A connection whose heartbeat interval, dead-peer timeout, handshake
    /// timeout and close linger are all `.seconds(Int64.max)`: the handshake
    /// deadline and the heartbeat trapped as it connected, the close grace as it closed.
    @Test func aConnectionWhoseTimersAreAllTheLargestConnectsExchangesAndCloses() async {
        await #expect(processExitsWith: .success) {
            let never = Duration.seconds(Int64.max)
            let secret = PairingSecret.generate()
            let configuration = testConfiguration(secret) {
                $0.heartbeatInterval = never
                $0.deadPeerTimeout = never
                $0.handshakeTimeout = never
                $0.closeLinger = never
            }
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
            let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: configuration)
            let accepted = try await first(of: listener.connections, "the accepted connection")
            let frame = Frame(type: 2, payload: Array("hello".utf8))
            try await dialer.send(frame)
            guard try await receive(1, from: accepted) == [frame] else { throw WaitFailed(description: "the frame did not arrive") }
            try await withDeadline("both ends to close") {
                await dialer.close()
                await accepted.close()
                await listener.close()
            }
        }
    }

    /// A rejection rate limit of one per `.seconds(Int64.max)`: the timer that
    /// reports the rejections counted past the burst trapped.
    @Test func aRejectionLimitOfTheLargestIntervalCountsWithoutTrapping() async {
        await #expect(processExitsWith: .success) {
            let configuration = testConfiguration(PairingSecret.generate()) {
                $0.rejectionReportLimit = RateLimit(burst: 1, interval: .seconds(Int64.max))
            }
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
            await RejectionLimitTests.flood(port: listener.port, count: 3)
            try await withDeadline("the listener to close") { await listener.close() }
        }
    }

    /// A reconnect policy whose delays are all `.seconds(Int64.max)`: the
    /// wait after the first failed dial trapped.
    @Test func aDialerWithTheLargestBackoffWaitsWithoutTrapping() async {
        await #expect(processExitsWith: .success) {
            let never = Duration.seconds(Int64.max)
            let (waits, wait) = AsyncStream.makeStream(of: Duration.self)
            // The dialer's own wait, told as it begins. The dialing task cannot end before it
            // returns: a wait that traps does so before the dialer is done.
            let sleep: @Sendable (Duration) async throws -> Void = { delay in
                wait.yield(delay)
                try await ReconnectingDialer.timerSleep(delay)
            }
            let dialer = ReconnectingDialer(policy: ReconnectPolicy(initialDelay: never, maxDelay: never, jitter: 0), seed: 1, sleep: sleep) {
                throw TransportError(.connectFailed, "no peer")
            }
            let dialing = Task { for await _ in dialer {} }
            try await first(of: waits, "the wait after the failed dial")
            await dialer.close()
            try await withDeadline("the dialer to end") { await dialing.value }
            guard dialer.attempts == 1 else { throw WaitFailed(description: "\(dialer.attempts) attempts") }
        }
    }
}

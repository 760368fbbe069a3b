import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A connection that forwards to an in-memory one but keeps the protocol's
/// default `deliversEveryFrame` (false): what an app's own transport over a
/// lossy link (WatchConnectivity's `sendMessage`) looks like to the engine.
private final class AppTransport: FrameConnection {
    let base: InMemoryConnection
    init(_ base: InMemoryConnection) { self.base = base }
    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }
    func send(_ frame: Frame) async throws { try await base.send(frame) }
    func close() async { await base.close() }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
}

/// Runs a phone and a watch session with `config` (over `AppTransport` when
/// `lossy`) until the watch has the phone's `writes`, then until the phone is idle.
private func syncOnce(config: ReplicationConfiguration, lossy: Bool = false, tickInterval: Duration = .milliseconds(20),
                      quietTickInterval: Duration = .seconds(5), writes: [Int] = [7]) async throws {
    let pair = try Pair()
    let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: tickInterval, quietTickInterval: quietTickInterval)
    let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: tickInterval, quietTickInterval: quietTickInterval)
    let (a, b) = InMemoryConnection.makePair()
    let (ca, cb): (any FrameConnection, any FrameConnection) = lossy ? (AppTransport(a), AppTransport(b)) : (a, b)
    let tasks = [Task { await phone.run(over: ca) }, Task { await watch.run(over: cb) }]
    for (index, value) in writes.enumerated() { try await pair.phone.set(value, for: TestKeys.daily["d\(index)"]) }
    try await eventually(pair.watch, "the watch to get the phone's writes", within: .seconds(20)) {
        try writes.indices.allSatisfy { try pair.watch.value(for: TestKeys.daily["d\($0)"]) == writes[$0] }
    }
    try await phone.waitUntilIdle(timeout: .seconds(20))
    await a.close()
    try await withDeadline("the sessions to end", within: .seconds(20)) { for task in tasks { _ = await task.value } }
}

/// Public settings given extreme but typeable values (`.max`, "no limit",
/// "never"): each is clamped, and nothing traps or hangs. A test that trapped
/// runs its body in a child process (an exit test): the trap fails that test
/// instead of killing the run.
@Suite(.timeLimit(.minutes(3))) struct ConfigurationExtremesTests {
    // MARK: window

    /// `window = .max` (meant as "no backpressure") trapped on an arithmetic
    /// overflow as the session started (its read-ahead is twice the window).
    @Test func aWindowOfIntMaxIsTakenAsTheLargestAndSyncs() async {
        var config = ReplicationConfiguration(pairingEpoch: "test")
        config.window = .max
        #expect(config.window == ReplicationConfiguration.maxWindow)
        await #expect(processExitsWith: .success) {
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.window = .max
            try await syncOnce(config: config)
        }
    }

    // MARK: retransmit interval

    /// `retransmitMilliseconds = .max` ("never resend") over an app's own
    /// transport (`deliversEveryFrame` false) trapped once the session was
    /// idle: the caught-up notice's renewal multiplied it by four.
    @Test func theLargestRetransmitIntervalOverALossyTransportSyncsAndGoesIdle() async {
        await #expect(processExitsWith: .success) {
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.retransmitMilliseconds = .max
            try await syncOnce(config: config, lossy: true)
        }
    }

    /// With `retransmitMilliseconds = .max`, a message resent early (a later
    /// one was acknowledged first) trapped at the next tick: its backoff is
    /// the interval times its attempts.
    @Test func aMessageResentEarlyWithTheLargestRetransmitIntervalWaitsWithoutTrapping() async {
        await #expect(processExitsWith: .success) {
            var phone = try ReplicationSessionTests.establishedPhone()
            phone.retransmitInterval = .max
            let lost = ReplicationSessionTests.batch(&phone, key: "a", seq: 1, now: 0)
            guard let acknowledged = ReplicationSessionTests.batch(&phone, key: "b", seq: 2, now: 10).asBatch else { throw WaitFailed(description: "no batch") }
            _ = phone.acknowledgeBatch(acknowledged.id)
            let resent = ReplicationSessionTests.retransmissions(&phone, from: 100, through: 1_000)
            guard resent.map(\.message) == [lost] else { throw WaitFailed(description: "resent \(resent)") }
        }
    }
}

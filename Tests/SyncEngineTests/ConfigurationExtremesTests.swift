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

    // MARK: durations a timer sleeps for

    /// `waitUntilIdle(timeout: .seconds(Int64.max))` ("wait until idle, the
    /// store closes or I cancel") trapped in the standard library's
    /// task sleep ("Not enough bits"); so did `idleBlockers(within:)`.
    @Test func waitingUntilIdleWithTheLargestTimeoutReturnsOnceIdle() async {
        await #expect(processExitsWith: .success) {
            let pair = try Pair()
            let config = ReplicationConfiguration(pairingEpoch: "test")
            let phone = SyncPeer(store: pair.phone, configuration: config)
            let watch = SyncPeer(store: pair.watch, configuration: config)
            let (a, b) = InMemoryConnection.makePair()
            let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
            try await pair.phone.set(3, for: TestKeys.steps)
            try await withDeadline("idle") { try await phone.waitUntilIdle(timeout: .seconds(Int64.max)) }
            let blockers = try await withDeadline("the idle blockers") { await phone.idleBlockers(within: .seconds(Int64.max)) }
            guard blockers.isEmpty, try pair.watch.value(for: TestKeys.steps) == 3 else { throw WaitFailed(description: "\(blockers)") }
            await a.close()
            try await withDeadline("the sessions to end") { for task in tasks { _ = await task.value } }
        }
    }

    /// `runQueued(pollInterval: .seconds(Int64.max), quietPollInterval: …)`
    /// (rounds only on local writes) trapped in its first timer.
    @Test func runQueuedWithTheLargestPollIntervalsRunsARoundOnEachWrite() async {
        await #expect(processExitsWith: .success) {
            let pair = try Pair()
            let folder = TempFolder()
            let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
            let waits = pair.phone.timedWaits.subscribe()
            let rounds = Task { await phone.runQueued(through: phoneBox, pollInterval: .seconds(Int64.max), quietPollInterval: .seconds(Int64.max)) }
            try await first(of: waits, "the timer after the first round") { if case .queuedRound = $0 { true } else { false } }
            try await pair.phone.set(3, for: TestKeys.steps)
            try await first(of: waits, "the timer after the write's round") { if case .queuedRound = $0 { true } else { false } }
            try watch.deliverQueued(through: watchBox)
            guard try pair.watch.value(for: TestKeys.steps) == 3 else { throw WaitFailed(description: "the write was not posted") }
            rounds.cancel()
            try await withDeadline("the rounds to end") { await rounds.value }
            withExtendedLifetime(folder) {}
        }
    }

    /// `storageFullRetryInterval = .seconds(Int64.max)` ("after a full disk,
    /// only a local write starts a round"): `runQueued`'s pause after the
    /// round that failed trapped.
    @Test func theLargestStorageFullRetryIntervalPausesQueuedRoundsUntilAWrite() async {
        await #expect(processExitsWith: .success) {
            let stores = try StorageFullTests.PhoneAndWatch()
            defer { stores.close() }
            var configuration = stores.configuration
            configuration.storageFullRetryInterval = .seconds(Int64.max)
            let phone = SyncPeer(store: stores.phone, configuration: configuration)
            let watch = SyncPeer(store: stores.watch, configuration: configuration)
            let (phoneBox, watchBox) = try stores.mailboxes()
            try await stores.phone.set(4, for: TestKeys.steps)
            try phone.deliverQueued(through: phoneBox)
            StorageFullTests.vfs.setDiskFull(true)
            let waits = stores.watch.timedWaits.subscribe()
            let rounds = Task { await watch.runQueued(through: watchBox, pollInterval: .milliseconds(5), quietPollInterval: .milliseconds(20)) }
            try await first(of: waits, "the pause after the round that failed") { if case .queuedRound(let wait) = $0 { wait > .seconds(3_600) } else { false } }
            StorageFullTests.vfs.setDiskFull(false)
            try await stores.watch.set(1, for: TestKeys.daily["from-the-watch"])
            try await eventually(stores.watch, "the queued steps on the watch") { try stores.watch.storedValue(for: TestKeys.steps) == 4 }
            rounds.cancel()
            try await withDeadline("the rounds to end") { await rounds.value }
        }
    }

    /// The same for a dialing loop's pause after a session that failed for a
    /// full device (`maintainConnection`): it trapped.
    @Test func theLargestStorageFullRetryIntervalPausesDialingUntilAWrite() async {
        await #expect(processExitsWith: .success) {
            let pair = try Pair()
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.storageFullRetryInterval = .seconds(Int64.max)
            let watch = SyncPeer(store: pair.watch, configuration: config)
            let waits = pair.watch.timedWaits.subscribe()
            let pause = Task { await watch.pauseWhileStorageIsFull() }
            try await first(of: waits, "the pause") { if case .storageFullPause = $0 { true } else { false } }
            try await pair.watch.set(1, for: TestKeys.steps)
            try await withDeadline("the pause to end at the write") { await pause.value }
        }
    }

    /// `StoreOptions.externalChangePollInterval = .seconds(Int64.max)`: the
    /// store's poller trapped as soon as it started.
    @Test func theLargestExternalChangePollIntervalDoesNotTrap() async {
        await #expect(processExitsWith: .success) {
            let folder = TempFolder()
            let (waits, wait) = AsyncStream.makeStream(of: Duration.self)
            var options = StoreOptions()
            options.externalChangePollInterval = .seconds(Int64.max)
            options.externalLookWillWait = { wait.yield($0) }
            let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.steps]), options: options)
            try await store.set(1, for: TestKeys.steps)
            // Told just before the timer's first wait begins: the trap came at its start. The wait
            // told is the one slept, so a timer that would trap fails here even if the process ends first.
            let firstWait = try await first(of: waits, "the timer's first wait")
            guard firstWait == .longestSleep else { throw WaitFailed(description: "the timer's first wait is \(firstWait)") }
            store.close()
        }
    }

    /// `SyncPeer(tickInterval: .seconds(.max), quietTickInterval: …)`: the
    /// session's first tick timer trapped.
    @Test func theLargestTickIntervalsStillSync() async {
        await #expect(processExitsWith: .success) {
            try await syncOnce(config: ReplicationConfiguration(pairingEpoch: "test"),
                               tickInterval: .seconds(Int64.max), quietTickInterval: .seconds(Int64.max))
        }
    }

    /// `acknowledgementSyncInterval = .seconds(Int64.max)`: the timer for
    /// the acknowledgements of a second batch within the interval trapped.
    @Test func theLargestAcknowledgementSyncIntervalStillDelivers() async {
        await #expect(processExitsWith: .success) {
            let pair = try Pair()
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.acknowledgementSyncInterval = .seconds(Int64.max)
            config.burstCoalescing = nil
            let phone = SyncPeer(store: pair.phone, configuration: config)
            let watch = SyncPeer(store: pair.watch, configuration: config)
            let (a, b) = InMemoryConnection.makePair()
            let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
            for value in 1...20 { try await pair.phone.set(value, for: TestKeys.daily["d\(value)"]) }
            try await eventually(pair.watch, "the writes on the watch") { try pair.watch.value(for: TestKeys.daily["d20"]) == 20 }
            await a.close()
            try await withDeadline("the sessions to end") { for task in tasks { _ = await task.value } }
        }
    }

    /// `BurstCoalescing` with `gap`, `pause` and `maxDelay` of
    /// `.seconds(Int64.max)`: the timer of a commit held back trapped.
    @Test func burstCoalescingWithTheLargestDelaysStillSyncs() async {
        await #expect(processExitsWith: .success) {
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.burstCoalescing = BurstCoalescing(gap: .seconds(Int64.max), pause: .seconds(Int64.max), maxDelay: .seconds(Int64.max))
            try await syncOnce(config: config, writes: Array(1...20))
        }
    }

    /// A WAL trim delay (`StoreOptions.walTrimIdleDelay`) of
    /// `.seconds(Int64.max)`: its timer's nanoseconds overflowed and trapped
    /// after the first background checkpoint.
    @Test func theLargestWALTrimDelayDoesNotTrap() async {
        await #expect(processExitsWith: .success) {
            let folder = TempFolder()
            let store = try BackgroundCheckpointTests.trimmingStore(in: folder, idleDelay: .seconds(Int64.max))
            try BackgroundCheckpointTests.growTheWAL(of: store)
            store.waitForBackgroundCheckpoints()
            store.close()
        }
    }

    // MARK: reader connections

    /// `StoreOptions.readerConnections = .max` ("no limit"): the store opened
    /// and read, but `close()` waited for each of `Int.max` places, one by one,
    /// and never returned.
    @Test func theLargestReaderPoolIsTakenAsTheMostAndItsStoreCloses() async throws {
        let folder = TempFolder()
        var options = StoreOptions()
        options.readerConnections = .max
        #expect(options.readerConnections == StoreOptions.maxReaderConnections)
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.steps]), options: options)
        try await store.set(4, for: TestKeys.steps)
        store.cache.invalidateAll()
        #expect(try store.value(for: TestKeys.steps) == 4)
        try await withDeadline("close() of a store with readerConnections = .max", within: .seconds(10)) {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread {
                    store.close()
                    done.resume()
                }
            }
        }
    }
}

import Foundation
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Local commits in a burst join the next batch while one is in flight
/// (`BurstCoalescing`); a commit on an idle link, or after a pause, goes at
/// once. Counted in frames and entries, with the instants given by the test.
@Suite struct BurstCoalescingTests {
    /// A phone and a watch endpoint, established, with the stores behind them.
    struct Session {
        let pair: Pair
        let phone: ReplicationEndpoint
        let watch: ReplicationEndpoint
        let start = ContinuousClock.now

        init(coalescing: BurstCoalescing? = BurstCoalescing(gap: .milliseconds(1), maxDelay: .seconds(60))) throws {
            pair = try Pair()
            var configuration = ReplicationConfiguration(pairingEpoch: "test")
            configuration.burstCoalescing = coalescing
            phone = ReplicationEndpoint(store: pair.phone, configuration: configuration)
            watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
            establish(phone, watch)
            #expect(phone.isEstablished && watch.isEstablished)
        }

        /// `microseconds` after the session started.
        func at(_ microseconds: Int) -> ContinuousClock.Instant { start + .microseconds(microseconds) }

        /// Commits one sample under its own key, in its own transaction, and tells the phone's endpoint at `instant`.
        func commit(_ i: Int, at instant: ContinuousClock.Instant) throws -> [Frame] {
            try pair.phone.setNow(i, for: TestKeys.daily["s\(i)"])
            return phone.localChange(now: 0, at: instant)
        }

        /// `commit(_:at:)` for a write that began at `began` and committed at `instant`,
        /// the commit before it made at `previous`.
        func commit(_ i: Int, began: ContinuousClock.Instant, at instant: ContinuousClock.Instant,
                    previous: ContinuousClock.Instant) throws -> [Frame] {
            try pair.phone.setNow(i, for: TestKeys.daily["s\(i)"])
            return phone.localChange(now: 0, at: instant, previousCommit: previous, startedAt: began)
        }
    }

    /// The entries of each batch among `frames`.
    static func batchSizes(_ frames: [Frame]) throws -> [Int] {
        try frames.compactMap { frame in
            guard case .batch(let batch) = try SyncMessage(frame: frame) else { return nil }
            return batch.entries.count
        }
    }

    @Test func commitsDuringAnInFlightBatchJoinTheNextBatch() throws {
        let session = try Session()
        // The link is idle: the first commit goes at once.
        let first = try session.commit(0, at: session.at(0))
        #expect(try Self.batchSizes(first) == [1])
        // 49 more, 10 µs apart, while that batch is in flight: held.
        for i in 1..<50 {
            #expect(try session.commit(i, at: session.at(i * 10)).isEmpty)
        }
        // The acknowledgement of the first batch arrives mid-burst: they go on waiting.
        let acks = first.flatMap { session.watch.receive($0, now: 0) }
        #expect(acks.flatMap { session.phone.receive($0, now: 0) }.isEmpty)
        // The burst pauses for `gap` (1 ms after the last commit): all of them go, in one batch.
        #expect(session.phone.heldUntil == session.at(490 + 1_000))
        let next = session.phone.releaseHeld(now: 0, at: session.at(1_490))
        #expect(try Self.batchSizes(next) == [49])
        let more = next.flatMap { session.watch.receive($0, now: 0) }.flatMap { session.phone.receive($0, now: 0) }
        #expect(try Self.batchSizes(more).isEmpty)
        #expect(session.phone.isIdle)
        #expect(session.pair.phone.syncCounters.batchesSent == 2)
        #expect(try session.pair.watch.value(for: TestKeys.daily["s49"]) == 49)
    }

    /// The acknowledgement of the batch in flight empties the window; the
    /// burst's next commits still join the held ones instead of going alone.
    @Test func aBurstKeepsFillingItsBatchAfterTheWindowEmpties() throws {
        let session = try Session()
        let first = try session.commit(0, at: session.at(0))
        #expect(try Self.batchSizes(first) == [1])
        for i in 1..<20 { #expect(try session.commit(i, at: session.at(i * 10)).isEmpty) }
        let acks = first.flatMap { session.watch.receive($0, now: 0) }
        #expect(acks.flatMap { session.phone.receive($0, now: 0) }.isEmpty)
        // Nothing is in flight now, but the burst goes on: its commits are held with the others.
        for i in 20..<40 { #expect(try session.commit(i, at: session.at(i * 10)).isEmpty, "commit \(i) went alone") }
        let next = session.phone.releaseHeld(now: 0, at: session.at(390 + 1_000))
        #expect(try Self.batchSizes(next) == [39])
        #expect(session.pair.phone.syncCounters.batchesSent == 2)
    }

    /// A commit that lands right after the stream was read is a new local
    /// change: it waits to join the next batch instead of going at once in a
    /// batch of its own behind the one just read (the pump read the stream until empty).
    @Test func aCommitLandingDuringTheReadJoinsTheNextBatch() throws {
        let pair = try Pair()
        var configuration = ReplicationConfiguration(pairingEpoch: "test")
        configuration.burstCoalescing = BurstCoalescing(gap: .milliseconds(1), maxDelay: .seconds(60))
        let port = SQLiteReplicationPort(pair.phone)
        let phone = ReplicationEndpoint(port: port, reporter: StoreReporter(pair.phone), configuration: configuration)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
        establish(phone, watch)
        let start = ContinuousClock.now
        try pair.phone.setNow(0, for: TestKeys.daily["s0"])
        var landed = false
        port.afterStreamRead = {
            guard !landed else { return }
            landed = true
            try pair.phone.setNow(1, for: TestKeys.daily["s1"])
        }
        let first = phone.localChange(now: 0, at: start)
        #expect(try Self.batchSizes(first) == [1])
        // The loop hears of that commit 10 µs later, with the first batch in flight: held, then it goes with the next.
        #expect(phone.localChange(now: 0, at: start + .microseconds(10)).isEmpty)
        #expect(try pair.phone.value(for: TestKeys.daily["s1"]) == 1)
        try pair.phone.setNow(2, for: TestKeys.daily["s2"])
        #expect(phone.localChange(now: 0, at: start + .microseconds(20)).isEmpty)
        let next = phone.releaseHeld(now: 0, at: start + .microseconds(20) + .milliseconds(1))
        #expect(try Self.batchSizes(next) == [2])
        #expect(pair.phone.syncCounters.batchesSent == 2)
    }

    /// A commit's instant is taken when it commits, not once its observers
    /// were told: a writer descheduled in between would otherwise make its
    /// next commit look close behind it (a burst) and be held back.
    @Test func aCommitIsTimedWhenItCommits() throws {
        let pair = try Pair()
        let seen = Mutex<[ContinuousClock.Instant?]>([])
        let observation = pair.phone.observeChanges(matching: .all) { _ in
            seen.withLock { $0.append(pair.phone.localCommitInstants.latest) }
        }
        defer { observation.cancel() }
        let before = ContinuousClock.now
        try pair.phone.setNow(1, for: TestKeys.daily["a"])
        let during = try #require(seen.withLock { $0 }.first)
        #expect(during.map { $0 >= before } == true, "the commit was not timed before its observers ran")
    }

    /// Without coalescing (before this round) every commit sends its own
    /// batch while the window has room: the same burst takes more batches.
    @Test func withoutCoalescingEachCommitSendsItsOwnBatch() throws {
        let session = try Session(coalescing: nil)
        var sent: [Frame] = []
        for i in 0..<10 { sent += try session.commit(i, at: session.at(i * 10)) }
        #expect(try Self.batchSizes(sent) == Array(repeating: 1, count: 10))  // the window (16) has room for each
    }

    /// A commit after a pause of at least `gap` goes at once, even with a batch
    /// in flight (the next write of a writer waiting for each to be visible).
    @Test func aCommitAfterAPauseGoesAtOnce() throws {
        let session = try Session()
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        // 2 ms later (gap 1 ms), the first still unacknowledged.
        #expect(try Self.batchSizes(try session.commit(1, at: session.at(2_000))) == [1])
        #expect(session.phone.heldUntil == nil)
    }

    /// Held commits go out once the burst pauses for `gap`, or once the oldest
    /// has waited `maxDelay`, when no acknowledgement came first.
    @Test func heldCommitsGoOutAtTheirDeadline() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(500), pause: .microseconds(500), maxDelay: .milliseconds(2)))
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        #expect(try session.commit(1, at: session.at(100)).isEmpty)
        #expect(try session.commit(2, at: session.at(400)).isEmpty)
        // The burst paused: due 500 µs after the last commit.
        #expect(session.phone.heldUntil == session.at(900))
        #expect(session.phone.releaseHeld(now: 0, at: session.at(899)).isEmpty)
        #expect(try Self.batchSizes(session.phone.releaseHeld(now: 0, at: session.at(900))) == [2])
        #expect(session.phone.heldUntil == nil)

        // A burst that never pauses: held at most `maxDelay` from its first held commit.
        var sent: [Frame] = []
        for i in 0..<30 { sent += try session.commit(10 + i, at: session.at(1_000 + i * 100)) }
        // 1,000 µs follows a pause: sent at once; held from 1,100 µs until the commit at 3,100 µs sends 21.
        #expect(try Self.batchSizes(sent) == [1, 21])
        #expect(session.phone.heldUntil == session.at(3_900 + 500))
    }

    /// A session loop that hears of commits late judges the burst by when
    /// they were made (`previousCommit`), not by when it heard of them.
    @Test func aBurstIsJudgedByCommitTimes() throws {
        let session = try Session()
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        // Heard of 5 ms later, but made 20 µs after the commit before it: part of a burst.
        try session.pair.phone.setNow(1, for: TestKeys.daily["s1"])
        #expect(session.phone.localChange(now: 0, at: session.at(5_000), previousCommit: session.at(4_980)).isEmpty)
        // A commit made meanwhile moves the burst's pause later.
        #expect(session.phone.releaseHeld(now: 0, at: session.at(6_000), lastCommit: session.at(5_500)).isEmpty)
        #expect(try Self.batchSizes(session.phone.releaseHeld(now: 0, at: session.at(6_500))) == [1])
    }

    /// Once a burst started (a quick commit while another waits), a
    /// hiccup shorter than `pause` (a descheduled writer) does not end it; a
    /// commit after a longer pause goes at once.
    @Test func aBurstLastsUntilAPause() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(250), pause: .milliseconds(1), maxDelay: .seconds(60)))
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        #expect(try session.commit(1, at: session.at(100)).isEmpty)     // 100 µs: held
        #expect(try session.commit(2, at: session.at(200)).isEmpty)     // within `gap` while one waits: a burst
        #expect(try session.commit(3, at: session.at(800)).isEmpty)     // 600 µs later: still the burst
        #expect(session.phone.heldUntil == session.at(1_800))
        #expect(try Self.batchSizes(try session.commit(4, at: session.at(2_100))) == [4])  // 1.3 ms later: it ended
        // The next commit 600 µs later is no burst (more than `gap`): at once.
        #expect(try Self.batchSizes(try session.commit(5, at: session.at(2_700))) == [1])
    }

    /// Two quick commits are not yet a burst: a writer that waits for each
    /// write to be visible and is sometimes quicker than `gap` has that write
    /// held for `gap` at most, not for `pause` (write→visible over the
    /// in-memory link had a mode at `pause` + 350 µs), and its next write,
    /// after a longer pause, goes at once.
    @Test func twoQuickCommitsWaitOnlyForGap() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(250), pause: .milliseconds(1), maxDelay: .seconds(60)))
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        #expect(try session.commit(1, at: session.at(200)).isEmpty)     // within `gap`, the first in flight: held
        #expect(session.phone.heldUntil == session.at(450))              // `gap` after it, not `pause`
        #expect(session.phone.releaseHeld(now: 0, at: session.at(449)).isEmpty)
        #expect(try Self.batchSizes(session.phone.releaseHeld(now: 0, at: session.at(450))) == [1])
        // Its write was visible; the next comes 400 µs after it (less than `pause`): at once.
        #expect(try Self.batchSizes(try session.commit(2, at: session.at(600))) == [1])
        #expect(session.phone.heldUntil == nil)
    }

    /// A writer that waits for each write to be visible never has two
    /// commits waiting at once, so it is never a burst, however quick: here
    /// each acknowledgement comes back before the next commit but one, so
    /// three commits in a row are within `gap` (which made a burst before,
    /// and the third waited `pause`: write→visible over the in-memory link
    /// had a mode at ≈ 1.1 ms). The third waits for `gap` at most.
    @Test func quickWritesOfAWriterThatWaitsAreNoBurst() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(250), pause: .milliseconds(1), maxDelay: .seconds(60)))
        let first = try session.commit(0, at: session.at(0))
        #expect(try Self.batchSizes(first) == [1])
        // Its acknowledgement is back before the next commit: nothing in flight, at once.
        #expect(try Self.batchSizes(first.flatMap { session.watch.receive($0, now: 0) }.flatMap { session.phone.receive($0, now: 0) }).isEmpty)
        #expect(session.phone.isIdle)
        let second = try session.commit(1, at: session.at(200))
        #expect(try Self.batchSizes(second) == [1])
        // The next is quick again, with the second in flight: held, for `gap` at most.
        #expect(try session.commit(2, at: session.at(400)).isEmpty)
        #expect(session.phone.heldUntil == session.at(650))
    }

    /// A commit held alone (not a burst) goes out as soon as the
    /// acknowledgement it waited behind empties the window, not at `gap`;
    /// a burst's commits go on waiting (`aBurstKeepsFillingItsBatchAfterTheWindowEmpties`).
    @Test func aCommitHeldAloneGoesWithTheAcknowledgement() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(250), pause: .milliseconds(1), maxDelay: .seconds(60)))
        let first = try session.commit(0, at: session.at(0))
        #expect(try session.commit(1, at: session.at(100)).isEmpty)
        let acks = first.flatMap { session.watch.receive($0, now: 0) }
        #expect(try Self.batchSizes(acks.flatMap { session.phone.receive($0, now: 0) }) == [1])
        #expect(session.phone.heldUntil == nil)
    }

    /// A wake-up that comes after a pump already sent its commit (queued
    /// behind the acknowledgement whose receipt read the stream) holds
    /// nothing: the next quick commit of a writer that waits for each write
    /// is held alone, for `gap` at most, and goes with the acknowledgement.
    /// Before, the stale wake-up counted as a held commit, the next one made
    /// a burst, and it waited `pause` (write→visible over the in-memory link
    /// had a mode at `pause` + 250 µs, 1.6 % of the samples).
    @Test func aWakeUpForACommitAlreadySentHoldsNothing() throws {
        let session = try Session(coalescing: BurstCoalescing(gap: .microseconds(250), pause: .milliseconds(1), maxDelay: .seconds(60)))
        let first = try session.commit(0, at: session.at(0))
        #expect(try Self.batchSizes(first) == [1])
        // The next commit lands; its wake-up is queued behind the first batch's acknowledgement,
        // whose receipt reads the stream and sends it.
        try session.pair.phone.setNow(1, for: TestKeys.daily["s1"])
        let second = first.flatMap { session.watch.receive($0, now: 0) }.flatMap { session.phone.receive($0, now: 0) }
        #expect(try Self.batchSizes(second) == [1])
        // Then the loop hears of that commit: it was already read, nothing waits.
        #expect(session.phone.localChange(now: 0, at: session.at(200)).isEmpty)
        #expect(session.phone.heldUntil == nil)
        // The writer saw it and writes again, quickly, with the second batch in flight: held for `gap`, not `pause`.
        #expect(try session.commit(2, at: session.at(400)).isEmpty)
        #expect(session.phone.heldUntil == session.at(650))
        // And it goes as soon as the second batch is acknowledged.
        let third = second.flatMap { session.watch.receive($0, now: 0) }.flatMap { session.phone.receive($0, now: 0) }
        #expect(try Self.batchSizes(third) == [1])
        _ = third.flatMap { session.watch.receive($0, now: 0) }
        #expect(try session.pair.watch.value(for: TestKeys.daily["s2"]) == 2)
    }

    /// A tick sends held commits too.
    @Test func aTickSendsHeldCommits() throws {
        let session = try Session()
        _ = try session.commit(0, at: session.at(0))
        #expect(try session.commit(1, at: session.at(10)).isEmpty)
        #expect(try Self.batchSizes(session.phone.tick(now: 1)) == [1])
    }

    /// The pause that decides is the writer's, from the commit before to the
    /// start of this write, not from commit to commit. With the default
    /// `gap`, a writer that waits for each write to be visible (here 150 µs
    /// after the last commit, less than the round trip and two commits that
    /// takes on this machine) sends each write at once. Before, commits 180 µs
    /// apart were within the 250 µs `gap`, and 8–9 % of `bench sync`'s
    /// write→visible samples waited 300–450 µs for the release timer.
    @Test func aWriterThatWaitsForEachWriteIsNotHeld() throws {
        let session = try Session(coalescing: BurstCoalescing())
        #expect(try Self.batchSizes(try session.commit(0, at: session.at(0))) == [1])
        // The first still in flight; the next write began 150 µs after it and took 30 µs.
        let second = try session.commit(1, began: session.at(150), at: session.at(180), previous: session.at(0))
        #expect(try Self.batchSizes(second) == [1])
        #expect(session.phone.heldUntil == nil)
    }

    /// A burst of slow commits (300 µs each, a large value or a slow device)
    /// from a writer in a loop is still a burst: each write begins right after
    /// the commit before. Timed from commit to commit, each looked like the
    /// end of a pause and went in a batch of its own.
    @Test func aBurstOfSlowCommitsIsABurst() throws {
        let session = try Session(coalescing: BurstCoalescing())
        var committed = session.at(0)
        #expect(try Self.batchSizes(try session.commit(0, at: committed)) == [1])
        for i in 1...3 {
            let began = committed + .microseconds(5)
            let frames = try session.commit(i, began: began, at: began + .microseconds(300), previous: committed)
            #expect(frames.isEmpty, "commit \(i) was sent at once")
            if i == 1 {
                // Held alone: until `gap` and as long again as its commit took, for the next one of a burst.
                #expect(session.phone.heldUntil == began + .microseconds(300) + .microseconds(100) + .microseconds(300))
            }
            committed = began + .microseconds(300)
        }
        // The burst pauses: its three commits go in one batch.
        #expect(try Self.batchSizes(session.phone.releaseHeld(now: 0, at: committed + .milliseconds(1))) == [3])
    }

    /// The store records when a local write began, before its commit.
    @Test func aCommitRecordsWhenItsWriteBegan() throws {
        let pair = try Pair()
        let before = ContinuousClock.now
        try pair.phone.setNow(1, for: TestKeys.daily["a"])
        let after = ContinuousClock.now
        let instants = pair.phone.localCommitInstants
        let began = try #require(instants.latestStarted), committed = try #require(instants.latest)
        #expect(before <= began && began <= committed && committed <= after)
    }
}

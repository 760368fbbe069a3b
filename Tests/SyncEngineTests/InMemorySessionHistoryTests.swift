import Foundation
@_spi(Testing) @testable import SyncEngine
import SyncTransport
import Testing

/// Two replication sessions over in-memory ports, driven through thousands of
/// random histories: local writes and deletes on both sides, manual syncs,
/// frames dropped, duplicated and reordered, time passing, sessions restarted.
/// Once the link heals, both stores must hold the same state.
@Suite struct InMemorySessionHistoryTests {
    /// SplitMix64: a seeded generator, so a failing history replays from its seed.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let keys: [any KeyDeclaration] = [TestKeys.steps, TestKeys.name, TestKeys.token, TestKeys.watchFace, TestKeys.tags, TestKeys.daily,
                                             TestKeys.blob]

    /// What a history did, for the failure message.
    struct Outcome {
        var frames = 0
        var restarts = 0
        /// Sessions that started with a large value partly staged (its transfer resumes).
        var resumes = 0
        var divergence: String?
    }

    final class History {
        var rng: SeededGenerator
        let phone: InMemoryReplicationPort
        let watch: InMemoryReplicationPort
        let configuration: ReplicationConfiguration
        var phoneEndpoint: ReplicationEndpoint!
        var watchEndpoint: ReplicationEndpoint!
        var toWatch: [Frame] = []
        var toPhone: [Frame] = []
        var now: Int64 = 1_700_000_000_000
        var outcome = Outcome()
        /// Whether local writes include large values (slow in debug builds: every tenth history).
        let writesLargeValues: Bool

        init(seed: UInt64, faults: TestingFaults) throws {
            writesLargeValues = seed % 10 == 0
            rng = SeededGenerator(state: seed)
            let registry = try KeyRegistry(InMemorySessionHistoryTests.keys)
            phone = InMemoryReplicationPort(node: 0x11, role: .phone, registry: registry, clock: ManualClock(now: now))
            watch = InMemoryReplicationPort(node: 0x22, role: .watch, registry: registry,
                                            clock: ManualClock(now: now, skewMilliseconds: Int64.random(in: -5_000...5_000, using: &rng)))
            var configuration = ReplicationConfiguration(pairingEpoch: "memory")
            configuration.window = Int.random(in: 1...4, using: &rng)
            configuration.maxBatchEntries = Int.random(in: 1...4, using: &rng)
            configuration.chunkSize = [16 * 1024, 64 * 1024].randomElement(using: &rng)!
            configuration.testingFaults = faults
            self.configuration = configuration
            restart()
        }

        /// A new session on both sides (the connection dropped): what was in flight is lost.
        func restart() {
            outcome.restarts += 1
            if !((try? phone.partialTransfers()) ?? []).isEmpty || !((try? watch.partialTransfers()) ?? []).isEmpty { outcome.resumes += 1 }
            toWatch = []
            toPhone = []
            phoneEndpoint = ReplicationEndpoint(port: phone, reporter: RecordingReporter(keepsEvents: false), configuration: configuration)
            watchEndpoint = ReplicationEndpoint(port: watch, reporter: RecordingReporter(keepsEvents: false), configuration: configuration)
            toWatch += phoneEndpoint.start(now: now)
            toPhone += watchEndpoint.start(now: now)
        }

        func write(on port: InMemoryReplicationPort) throws {
            let own = port.role == .phone ? TestKeys.token.name : TestKeys.watchFace.name
            let choices = [TestKeys.steps.name, TestKeys.name.name, TestKeys.tags.name, own,
                           TestKeys.daily["a"].name, TestKeys.daily["b"].name, TestKeys.daily["c"].name]
            var key = choices.randomElement(using: &rng)!
            let value: [UInt8]?
            if writesLargeValues && Int.random(in: 0..<30, using: &rng) == 0 {
                // A large value: deferred to the next manual sync, then sent in chunks (resumed after a restart).
                key = TestKeys.blob.name
                let fill = UInt8.random(in: 0...255, using: &rng)
                value = [UInt8](repeating: fill, count: SyncStore.inlineValueLimit + Int.random(in: 1...60_000, using: &rng))
            } else if Int.random(in: 0..<6, using: &rng) == 0 {
                value = nil
            } else if key == TestKeys.tags.name {
                let tags = (0..<Int.random(in: 0...2, using: &rng)).map { _ in ["x", "y", "z", "w"].randomElement(using: &rng)! }
                value = Array(try JSONEncoder().encode(Array(Set(tags)).sorted()))
            } else if key == TestKeys.name.name || key == own {
                value = Array(try JSONEncoder().encode("v\(Int.random(in: 0..<5, using: &rng))"))
            } else {
                value = Array(try JSONEncoder().encode(Int.random(in: 0..<5, using: &rng)))
            }
            try port.write(key, value)
            pump()
        }

        func pump() {
            toWatch += phoneEndpoint.pump(now: now)
            toPhone += watchEndpoint.pump(now: now)
        }

        /// Delivers one frame of one direction: the first, or (reordered) another; maybe dropped or duplicated.
        func deliver(faulty: Bool) {
            let towardsWatch = toPhone.isEmpty || (!toWatch.isEmpty && Bool.random(using: &rng))
            var queue = towardsWatch ? toWatch : toPhone
            guard !queue.isEmpty else { return }
            let index = faulty && Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 0..<queue.count, using: &rng) : 0
            let roll = faulty ? Int.random(in: 0..<10, using: &rng) : 9
            let frame = roll == 0 ? queue[index] : queue.remove(at: index)   // 0: duplicated (stays queued)
            if towardsWatch { toWatch = queue } else { toPhone = queue }
            if roll == 1 { return }                                          // 1: dropped
            outcome.frames += 1
            if towardsWatch { toPhone += watchEndpoint.receive(frame, now: now) } else { toWatch += phoneEndpoint.receive(frame, now: now) }
        }

        func tick(by milliseconds: Int64) {
            now += milliseconds
            phone.clock.advance(by: milliseconds)
            watch.clock.advance(by: milliseconds)
            toWatch += phoneEndpoint.tick(now: now)
            toPhone += watchEndpoint.tick(now: now)
        }

        func run(steps: Int) throws {
            for _ in 0..<steps {
                switch Int.random(in: 0..<100, using: &rng) {
                case 0..<25: try write(on: Bool.random(using: &rng) ? phone : watch)
                case 25..<75: deliver(faulty: true)
                case 75..<90: tick(by: Int64.random(in: 0...3_000, using: &rng))
                case 90..<94: (Bool.random(using: &rng) ? phone : watch).requestManualSync()
                case 94..<97: pump()
                default: restart()
                }
            }
        }

        /// The link heals: every frame delivered in order, time passing, until both sides are idle.
        func heal() {
            phone.requestManualSync()
            watch.requestManualSync()
            if phoneEndpoint.failure != nil || watchEndpoint.failure != nil { restart() }
            pump()
            for _ in 0..<2_000 {
                if toWatch.isEmpty && toPhone.isEmpty {
                    if phoneEndpoint.isIdle && watchEndpoint.isIdle { return }
                    tick(by: configuration.retransmitMilliseconds)
                    pump()
                } else {
                    deliver(faulty: false)
                }
            }
        }

        /// Why the two stores differ, if they do: every key that travels both
        /// ways must be equal; a key only one side may send must never reach the other.
        func divergence() -> String? {
            if let failure = phoneEndpoint.failure ?? watchEndpoint.failure { return "a session failed: \(failure)" }
            if !(phoneEndpoint.isIdle && watchEndpoint.isIdle) { return "not idle after healing" }
            if watch.state(TestKeys.token.name) != nil { return "the phone-only key reached the watch" }
            if phone.state(TestKeys.watchFace.name) != nil { return "the watch-only key reached the phone" }
            for key in Set(phone.rows.keys).union(watch.rows.keys) where key != TestKeys.token.name && key != TestKeys.watchFace.name {
                let p = phone.state(key), w = watch.state(key)
                guard p?.version == w?.version, p?.deleted == w?.deleted, p?.value == w?.value else {
                    return "\(key) differs: phone \(String(describing: p)), watch \(String(describing: w))"
                }
            }
            return nil
        }
    }

    static func run(seed: UInt64, faults: TestingFaults = TestingFaults()) throws -> Outcome {
        let history = try History(seed: seed, faults: faults)
        var rng = SeededGenerator(state: seed ^ 0xABCD)
        try history.run(steps: Int.random(in: 20...120, using: &rng))
        history.heal()
        history.outcome.divergence = history.divergence()
        return history.outcome
    }

    @Test func thousandsOfRandomHistoriesConverge() async throws {
        var frames = 0, resumes = 0
        for seed in UInt64(1)...3_000 {
            // A long synchronous loop: let the tests beside it run (the cooperative pool has one thread per core).
            if seed % 16 == 0 { await Task.yield() }
            let outcome = try Self.run(seed: seed)
            frames += outcome.frames
            resumes += outcome.resumes
            if let divergence = outcome.divergence {
                Issue.record("history \(seed): \(divergence)")
                return
            }
        }
        #expect(frames > 100_000, "the histories exchanged frames (\(frames))")
        #expect(resumes > 0, "some sessions resumed a partly staged large value")
    }

    /// The harness can fail: with deletes deliberately not replicated, some history diverges.
    @Test func aHistoryWithSkippedTombstonesIsCaught() throws {
        let caught = try (UInt64(1)...300).contains { try Self.run(seed: $0, faults: TestingFaults(skipTombstones: true)).divergence != nil }
        #expect(caught)
    }

    /// And with conflicts won by arrival order instead of version order.
    @Test func aHistoryWithLastArrivalWinsIsCaught() throws {
        let caught = try (UInt64(1)...300).contains { try Self.run(seed: $0, faults: TestingFaults(lastArrivalWins: true)).divergence != nil }
        #expect(caught)
    }
}

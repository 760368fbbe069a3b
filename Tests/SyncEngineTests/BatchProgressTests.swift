import Foundation
import Logging
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

@Suite(.timeLimit(.minutes(5))) struct BatchProgressTests {
    /// A round's total is counted when it begins and stays fixed while
    /// changes keep coming: they go to the next round, which counts from 1.
    @Test func aRoundsTotalStaysFixedWhileNewChangesGoToTheNextRound() async throws {
        let pair = try Pair()
        for day in 1...5 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
        let events = pair.phone.events()
        var config = ReplicationConfiguration(pairingEpoch: "progress")
        config.maxBatchEntries = 2
        config.window = 1
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        var toPhone: [Frame] = [], toWatch: [Frame] = []
        for frame in phone.start(now: 0) { toPhone += watch.receive(frame, now: 0) }
        for frame in watch.start(now: 0) { toWatch += phone.receive(frame, now: 0) }
        var wroteDuringTheRound = false
        while !(toPhone.isEmpty && toWatch.isEmpty) {
            if !wroteDuringTheRound, toWatch.contains(where: { $0.type == SyncMessage.MessageType.batch.rawValue }) {
                // The round of 3 batches began: 3 more changes come in during it.
                wroteDuringTheRound = true
                for day in 6...8 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
            }
            let (p, w) = (toPhone, toWatch)
            (toPhone, toWatch) = ([], [])
            for frame in p { toWatch += phone.receive(frame, now: 0) }
            for frame in w { toPhone += watch.receive(frame, now: 0) }
        }
        #expect(try pair.watch.storedValue(for: TestKeys.daily["d8"]) == 8)
        var sent: [SyncEvent] = []
        while sent.reduce(0, { total, event in
            if case .batchSent(_, _, let entries) = event { total + entries } else { total }
        }) < 8 {
            sent.append(try await first(of: events, "the batch-sent events") { if case .batchSent = $0 { true } else { false } })
        }
        // Round 1: the 5 changes pending as it began, in 3 batches (the third has room for one new change).
        // Round 2: the 2 other new changes.
        #expect(sent == [.batchSent(number: 1, total: 3, entries: 2), .batchSent(number: 2, total: 3, entries: 2),
                         .batchSent(number: 3, total: 3, entries: 2), .batchSent(number: 1, total: 1, entries: 2)])
    }

    /// A `peerEvents()` subscriber alone gets counted rounds too; an uncounted total (0) reads "batch n sent".
    @Test func peerEventsSubscribersGetTheRoundsTotalToo() async throws {
        let pair = try Pair()
        for day in 1...3 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
        let peerEvents = pair.phone.peerEvents()
        var config = ReplicationConfiguration(pairingEpoch: "progress")
        config.maxBatchEntries = 2
        let link = (phone: ReplicationEndpoint(store: pair.phone, configuration: config),
                    watch: ReplicationEndpoint(store: pair.watch, configuration: config))
        var toPhone: [Frame] = [], toWatch: [Frame] = []
        for frame in link.phone.start(now: 0) { toPhone += link.watch.receive(frame, now: 0) }
        for frame in link.watch.start(now: 0) { toWatch += link.phone.receive(frame, now: 0) }
        while !(toPhone.isEmpty && toWatch.isEmpty) {
            let (p, w) = (toPhone, toWatch)
            (toPhone, toWatch) = ([], [])
            for frame in p { toWatch += link.phone.receive(frame, now: 0) }
            for frame in w { toPhone += link.watch.receive(frame, now: 0) }
        }
        // peerEvents() listens too: the round was counted.
        let first1 = try await first(of: peerEvents, "the first batch") { if case .batchSent = $0.event { true } else { false } }
        #expect(first1.event == .batchSent(number: 1, total: 2, entries: 2))
        #expect(SyncEvent.batchSent(number: 2, total: 0, entries: 1).description == "batch 2 sent (1 entries)")
    }
}

@Suite(.timeLimit(.minutes(5))) struct PendingBatchCountTests {
    /// The store counts a round's batches from keys and sizes alone: the same
    /// count and end as reading the rows the way a session sends them, over
    /// seeded mixes of small, large, deleted, other-peer and skipped changes.
    @Test func countingFromSizesMatchesReadingTheRows() async throws {
        var random = SeededRandom(seed: 20_261_123)
        for round in 0..<12 {
            let pair = try Pair()
            for i in 0..<random.nextInt(in: 0...60) {
                switch random.nextInt(in: 0...9) {
                case 0: try await pair.phone.set(Data(repeating: 7, count: SyncStore.inlineValueLimit + random.nextInt(in: 1...5_000)), for: TestKeys.blob)
                case 1: try await pair.phone.remove(TestKeys.daily["d\(random.nextInt(in: 0...20))"])
                case 2: try await pair.phone.set("t\(i)", for: TestKeys.token)  // phone only: passed over
                default: try await pair.phone.set(Int(random.next(below: 1 << 40)), for: TestKeys.daily["d\(random.nextInt(in: 0...40))"])
                }
            }
            let port = SQLiteReplicationPort(pair.phone)
            let registry = pair.phone.registry
            let skip: (String, Int64) -> Bool = { key, _ in !(registry.descriptor(forEntry: key)?.replicates(from: .phone) ?? false) }
            for (entries, bytes) in [(1, 1 << 20), (3, 1 << 20), (2048, 200), (5, 120)] {
                for drops in [false, true] {
                    let counted = try port.pendingBatches(for: 0x77, after: 0, maxEntries: entries, maxBytes: bytes, dropsDeletes: drops, skip: skip)
                    let read = try port.pendingBatchesByReadingRows(for: 0x77, after: 0, maxEntries: entries, maxBytes: bytes, dropsDeletes: drops, skip: skip)
                    #expect(counted.batches == read.batches && counted.through == read.through,
                            "round \(round), \(entries) entries / \(bytes) bytes, drops deletes \(drops): \(counted) vs \(read)")
                }
            }
        }
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Where a resolver's merge waits: a change `sync()` released stays released
/// when a merge replaces it, and a merge over the automatic limit is
/// reported as deferred, as a write of that size is.
@Suite(.timeLimit(.minutes(5))) struct MergedValueLaneTests {
    /// `count` tags of about 30 bytes each, named after `who`.
    static func tags(_ who: String, count: Int) -> [String] { (0..<count).map { "\(who)-\($0)-" + String(repeating: "t", count: 20) } }

    /// Both stores of `pair` hold `tags`.
    static func expectTags(_ tags: Set<String>, on pair: Pair, sourceLocation: SourceLocation = #_sourceLocation) throws {
        for store in [pair.phone, pair.watch] {
            #expect(Set(try store.storedValue(for: TestKeys.tags) ?? []) == tags, "on the \(store.role)", sourceLocation: sourceLocation)
        }
    }

    /// The chunk `frame` carries, if it is one.
    static func chunk(in frame: Frame) -> SyncMessage.Chunk? {
        guard frame.type == SyncMessage.MessageType.chunk.rawValue, case .chunk(let chunk)? = try? SyncMessage(frame: frame) else { return nil }
        return chunk
    }

    /// Starts both ends of `link` and runs them until quiet; every chunk from
    /// `a` is lost on the way and kept (the first copy of each version and index).
    static func startKeepingChunks(_ link: Link) -> [(chunk: SyncMessage.Chunk, frame: Frame)] {
        var chunks: [(chunk: SyncMessage.Chunk, frame: Frame)] = []
        link.run(link.a.start(now: link.now), link.b.start(now: link.now)) { frame in
            guard let chunk = chunk(in: frame) else { return false }
            if !chunks.contains(where: { $0.chunk.entry.version == chunk.entry.version && $0.chunk.index == chunk.index }) { chunks.append((chunk, frame)) }
            return true
        }
        return chunks
    }

    /// Whether `frame` carries entries (a batch or a chunk).
    static func carriesEntries(_ frame: Frame) -> Bool {
        frame.type == SyncMessage.MessageType.batch.rawValue || frame.type == SyncMessage.MessageType.chunk.rawValue
    }

    /// The watch writes a large value and calls `sync()`; before it is sent,
    /// the phone's newer-to-the-watch change arrives and is joined with it.
    /// The merge goes to the phone in the next session without another
    /// `sync()`. Before, the merge fell back to the manual lane: the watch's
    /// write, synced by its app, never reached the phone until the app synced
    /// again (fuzz seed 17100185).
    @Test func aMergeOfAChangeSyncReleasedIsSentWithoutAnotherSync() async throws {
        let pair = try Pair()
        let fromPhone = Self.tags("phone", count: 2)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        pair.watchClock.advance(by: 1_000)
        let fromWatch = Self.tags("watch", count: 4_000)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        #expect(try pair.watch.pendingSummary().manualWaiting == 1, "over the limit: deferred")
        try pair.watch.requestManualSync()
        // The watch's entries are lost on the way; the phone's reach the watch, which joins them with its own.
        let lossy = Link(pair.watch, pair.phone)
        lossy.run(lossy.a.start(now: lossy.now), lossy.b.start(now: lossy.now), droppingToB: Self.carriesEntries)
        let union = Set(fromPhone + fromWatch)
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == union)
        #expect(try pair.watch.pendingSummary().manualWaiting == 0, "the merge stays released")
        #expect(Set(try pair.phone.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone))
        let second = Link(pair.watch, pair.phone)
        second.connect()
        second.settle()
        try MergedValueLaneTests.expectTags(union, on: pair)
        #expect(try pair.watch.entryInfo(forKey: TestKeys.tags.name)?.version == pair.phone.entryInfo(forKey: TestKeys.tags.name)?.version)
    }

    /// Two values under the limit join into one over it: the merge waits for
    /// the next `sync()` like a write of that size, and the app is told it
    /// was deferred (before, it waited without a word).
    @Test func aMergeOverTheLimitIsReportedDeferredAndGoesWithTheNextSync() async throws {
        let pair = try Pair()
        let fromPhone = Self.tags("phone", count: 2_000)
        let fromWatch = Self.tags("watch", count: 2_000)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        #expect(try pair.watch.pendingSummary().manualWaiting == 0, "each under the limit")
        let events = pair.watch.events()
        let lossy = Link(pair.watch, pair.phone)
        lossy.run(lossy.a.start(now: lossy.now), lossy.b.start(now: lossy.now), droppingToB: Self.carriesEntries)
        let merged = try #require(try pair.watch.entryInfo(forKey: TestKeys.tags.name))
        #expect(merged.size > SyncPolicy.automaticLimit)
        try #require(pair.watch.syncCounters.deferred == 1)
        let deferred = try await first(of: events, "the watch's deferred event", where: { if case .deferred = $0 { true } else { false } })
        #expect(deferred == .deferred(key: TestKeys.tags.name, size: merged.size))
        #expect(try pair.watch.pendingSummary().manualWaiting == 1)
        let second = Link(pair.watch, pair.phone)
        second.connect()
        second.settle()
        #expect(Set(try pair.phone.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone), "waits for sync()")
        try pair.watch.requestManualSync()
        second.settle()
        try MergedValueLaneTests.expectTags(Set(fromPhone + fromWatch), on: pair)
    }
}

/// Large values at a version the receiver takes another value of while the transfer is under way.
@Suite(.timeLimit(.minutes(5))) struct SameVersionTransferTests {
    /// The watch's value reaches the phone twice at one version: first its
    /// own write in a batch, late, then its merge with the phone's value in
    /// chunks. The batch lands between the chunks, over the phone's delete;
    /// the chunks staged before it stay, and the merge is taken whole. Before,
    /// taking the batch dropped them as overtaken: the rest never added up
    /// and the phone kept the watch's write without the merge for good (fuzz
    /// seed 17200148).
    @Test func aValueTakenAtTheVersionOfATransferUnderWayKeepsItsChunks() async throws {
        let pair = try Pair()
        let fromPhone = MergedValueLaneTests.tags("phone", count: 2_000)
        let fromWatch = MergedValueLaneTests.tags("watch", count: 2_000)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        let link = Link(pair.watch, pair.phone)
        // The watch's batch is held back; the phone's value reaches the watch, which joins the two.
        var held: [Frame] = []
        link.run(link.a.start(now: link.now), link.b.start(now: link.now)) { frame in
            guard MergedValueLaneTests.carriesEntries(frame) else { return false }
            held.append(frame)
            return true
        }
        #expect(held.count == 1)
        // The phone deletes (older than the watch's version), and the watch releases its merge.
        pair.phoneClock.advance(by: 10)
        try await pair.phone.remove(TestKeys.tags)
        link.settle()
        try pair.watch.requestManualSync()
        var chunks: [Frame] = []
        link.run(link.a.pump(now: link.now), []) { frame in
            guard frame.type == SyncMessage.MessageType.chunk.rawValue else { return false }
            chunks.append(frame)
            return true
        }
        #expect(chunks.count >= 2)
        // A chunk, then the late batch, then the rest.
        link.run([chunks[0]], [])
        link.run(held, [])
        #expect(Set(try pair.phone.storedValue(for: TestKeys.tags) ?? []) == Set(fromWatch))
        link.run(Array(chunks.dropFirst()), [])
        link.settle()
        try MergedValueLaneTests.expectTags(Set(fromPhone + fromWatch), on: pair)
        #expect(try pair.phone.entryInfo(forKey: TestKeys.tags.name)?.version == pair.watch.entryInfo(forKey: TestKeys.tags.name)?.version)
    }
}

extension SameVersionTransferTests {
    /// The phone joins the watch's write with its own large value and sends
    /// the merge in chunks at the watch's version; a late chunk of the
    /// phone's own value (an older version, passed over) lands between them.
    /// The merge's chunks staged before it stay, and the merge is taken
    /// whole. Before, passing the old chunk over dropped every chunk up to the
    /// version held, the merge's among them: the rest never added up and the
    /// watch kept its write without the merge for good (fuzz seed 17100731).
    @Test func aLateChunkOfAnOlderVersionKeepsTheChunksOfTheVersionHeld() async throws {
        let pair = try Pair()
        let fromPhone = MergedValueLaneTests.tags("phone", count: 4_000)
        let fromWatch = MergedValueLaneTests.tags("watch", count: 2)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        try pair.phone.requestManualSync()
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        let link = Link(pair.phone, pair.watch)
        let chunks = MergedValueLaneTests.startKeepingChunks(link)
        let watchVersion = try #require(try pair.watch.entryInfo(forKey: TestKeys.tags.name)).version
        let merge = chunks.filter { $0.chunk.entry.version == watchVersion }.map(\.frame)
        let own = chunks.filter { $0.chunk.entry.version < watchVersion }.map(\.frame)
        #expect(merge.count >= 2 && !own.isEmpty, "\(chunks.map { "\($0.chunk.entry.version) \($0.chunk.index)" })")
        // A chunk of the merge, a late one of the phone's own value, then the rest of the merge.
        link.run([merge[0]], [])
        link.run([own[0]], [])
        link.run(Array(merge.dropFirst()), [])
        link.settle()
        try MergedValueLaneTests.expectTags(Set(fromPhone + fromWatch), on: pair)
    }
}

extension SameVersionTransferTests {
    /// A transfer cut off after its first chunk; before the next session the
    /// watch joins the phone's value into its own at the same version, and the
    /// next session resumes that version from the chunk after, so the phone's
    /// staged chunk is of the value before the merge (it names another value).
    /// From protocol 5 on the phone's acknowledgement of the chunk the
    /// transfer resumed at says it holds none of this value, and the watch
    /// sends it from chunk 0 in the same session. In a session of protocol 4
    /// the phone drops the staged chunk and ends the session, and the session
    /// after sends the merge whole. Before either, the two values' chunks
    /// joined, did not add up, and the session stayed open with the transfer
    /// unfinished on both sides, for as long as the connection lasted.
    @Test(arguments: [UInt16(4), 5])
    func aTransferResumedAfterAMergeAtItsVersionGoesWhole(protocolVersion: UInt16) async throws {
        let pair = try Pair()
        pair.watchClock.advance(by: 1_000)
        let fromWatch = MergedValueLaneTests.tags("watch", count: 4_000)
        let fromPhone = MergedValueLaneTests.tags("phone", count: 2)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        try pair.watch.requestManualSync()
        let isChunk = { (frame: Frame) in frame.type == SyncMessage.MessageType.chunk.rawValue }
        var sent = 0
        let range = 1...protocolVersion
        let one = Link(pair.watch, pair.phone, protocolRange: range)
        one.run(one.a.start(now: one.now), one.b.start(now: one.now)) { frame in
            guard isChunk(frame) else { return false }
            sent += 1
            return sent > 1
        }
        #expect(try pair.phone.stagedChunkBytes() > 0)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        let two = Link(pair.watch, pair.phone, protocolRange: range)
        two.run(two.a.start(now: two.now), two.b.start(now: two.now), droppingToB: isChunk)
        let union = Set(fromPhone + fromWatch)
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == union)
        let three = Link(pair.watch, pair.phone, protocolRange: range)
        three.connect()
        three.settle()
        if protocolVersion >= SyncMessage.valueProtocol {
            #expect(three.a.failure == nil && three.b.failure == nil)
            try MergedValueLaneTests.expectTags(union, on: pair)
            #expect(try pair.phone.stagedChunkBytes() == 0)
            #expect(three.a.isIdle && three.b.isIdle)
            let resumedAt = try #require(three.frames.compactMap { MergedValueLaneTests.chunk(in: $0.frame) }.first).index
            #expect(resumedAt == 1, "the transfer resumes after the chunk the phone's hello names")
            return
        }
        #expect(three.b.failure?.code == .malformedMessage)
        #expect(try pair.phone.stagedChunkBytes() == 0)
        let four = Link(pair.watch, pair.phone, protocolRange: range)
        four.connect()
        four.settle()
        try MergedValueLaneTests.expectTags(union, on: pair)
        #expect(four.a.isIdle && four.b.isIdle)
    }
}

extension SameVersionTransferTests {
    /// The phone's large value is on its way in chunks when the watch's older
    /// value arrives and the phone merges it in at the same version. The
    /// receiver stages one value of a version at a time (and before protocol 5
    /// an acknowledgement names only key, version and index), so the merge's
    /// transfer waits until every chunk of the value before it is
    /// acknowledged; then it goes, and the watch joins it in. Before, the two
    /// went at once and the watch's acknowledgements of the one were taken
    /// for the other's: the watch kept the value before the merge for good
    /// (fuzz seeds 17600634, 17800949).
    @Test func theMergeOfAVersionUnderWayWaitsForItsChunksThenGoes() async throws {
        let pair = try Pair()
        let fromPhone = MergedValueLaneTests.tags("phone", count: 4_000)
        let fromWatch = MergedValueLaneTests.tags("watch", count: 2)
        try await pair.watch.set(fromWatch, for: TestKeys.tags)
        pair.phoneClock.advance(by: 1_000)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        try pair.phone.requestManualSync()
        let link = Link(pair.phone, pair.watch)
        let chunks = MergedValueLaneTests.startKeepingChunks(link).map(\.chunk)
        let merged = try #require(try pair.phone.rawValue(forKey: TestKeys.tags.name))
        #expect(!chunks.isEmpty)
        #expect(chunks.allSatisfy { $0.totalChecksum != Checksum.crc32(merged) }, "the merge went while the value before was unacknowledged")
        // The value before goes again, then the merge.
        link.now += 600_000
        link.run(link.a.tick(now: link.now), [])
        link.settle()
        #expect(link.frames.contains { $0.from == "a" && MergedValueLaneTests.chunk(in: $0.frame)?.totalChecksum == Checksum.crc32(merged) })
        #expect(link.b.failure == nil, "\(String(describing: link.b.failure))")
        try MergedValueLaneTests.expectTags(Set(fromPhone + fromWatch), on: pair)
    }
}


extension SameVersionTransferTests {
    /// The phone's large tags (released: a large value is manual) and a
    /// second watch Y whose small tags are older: once Y's reach the phone, it
    /// merges them in at its own version, a second value of that version.
    static func largeValueAndAnOlderWrite() async throws -> (pair: Pair, other: SyncStore, fromPhone: [String], fromOther: [String]) {
        let pair = try Pair()
        let other = try SyncStore(path: pair.folder.file("watch-y.sqlite"), role: .watch, registry: try TestKeys.registry(),
                                  options: StoreOptions(clock: ManualClock(), encryption: .keyFile(path: pair.folder.file("watch-y.key"))))
        let fromPhone = MergedValueLaneTests.tags("phone", count: 8_000)
        let fromOther = MergedValueLaneTests.tags("watch-y", count: 2)
        try await other.set(fromOther, for: TestKeys.tags)
        pair.phoneClock.advance(by: 1_000)
        try await pair.phone.set(fromPhone, for: TestKeys.tags)
        try pair.phone.requestManualSync()
        return (pair, other, fromPhone, fromOther)
    }

    /// The phone's large value reaches watch X; then watch Y's concurrent
    /// write reaches the phone, which merges it in at the same version and
    /// sends the merge to X. A late copy of a chunk of the value before (the
    /// one X holds) reaches X while the merge's transfer is under way. Its
    /// acknowledgement names that value (protocol 5): the phone keeps the
    /// merge's chunk of that index in flight, X keeps the merge's staged
    /// chunks, and the merge is taken in the same session. Before, the
    /// acknowledgement was taken for the merge's chunk and the copy replaced
    /// the merge's staged chunks: the merge did not complete in that session.
    @Test func aLateCopyOfAChunkOfTheValueBeforeAMergeLeavesTheMergeToComplete() async throws {
        let (pair, other, fromPhone, fromOther) = try await SameVersionTransferTests.largeValueAndAnOlderWrite()
        // X takes the phone's value; a copy of each of its chunks is kept.
        let toX = Link(pair.phone, pair.watch)
        var before: [Frame] = []
        toX.run(toX.a.start(now: toX.now), toX.b.start(now: toX.now)) { frame in
            if MergedValueLaneTests.chunk(in: frame) != nil { before.append(frame) }
            return false
        }
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone))
        // Y's write reaches the phone, which merges it in at the version X holds.
        let toY = Link(pair.phone, other)
        toY.connect()
        let merged = try #require(try pair.phone.rawValue(forKey: TestKeys.tags.name))
        #expect(try pair.phone.entryInfo(forKey: TestKeys.tags.name)?.version == pair.watch.entryInfo(forKey: TestKeys.tags.name)?.version)
        var merge: [Frame] = []
        toX.run(toX.a.pump(now: toX.now), []) { frame in
            guard let chunk = MergedValueLaneTests.chunk(in: frame), chunk.totalChecksum == Checksum.crc32(merged) else { return false }
            merge.append(frame)
            return true
        }
        #expect(before.count >= 3 && merge.count >= 3)
        // The merge's first chunk, a late copy of the value before's second chunk, then the rest of the merge.
        toX.run([merge[0]], [])
        toX.run([before[1]], [])
        toX.run(Array(merge.dropFirst()), [])
        toX.settle()
        #expect(toX.a.failure == nil && toX.b.failure == nil)
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone + fromOther))
        #expect(toX.a.isIdle && toX.b.isIdle)
    }
}

extension SameVersionTransferTests {
    /// The phone's large value A is on its way in chunks to watch X, which
    /// stages the first two; watch Y's write reaches the phone, which merges
    /// it in at A's version (value B). A late copy of X's first hello starts
    /// the phone's session over (a lossy link duplicates): it forgets what it
    /// had in flight, and A's chunks are still on the link. The phone then
    /// ends the session rather than send B, so that B goes in the next one
    /// with nothing of A on the link. Before, it sent B at once.
    ///
    /// A sender of an older build still sends B: X gets B's first chunk,
    /// then a late copy of a chunk of A, then the rest of B. The late copy
    /// is passed over (acknowledged by its value from protocol 5 on), and B
    /// completes. Before, it replaced the B chunk X had staged and
    /// acknowledged, and B never added up (fuzz seeds 407002756 over
    /// protocol 1, 417000248 over protocol 7).
    @Test(arguments: [1...1, 1...4, 1...SyncMessage.highestProtocolVersion] as [ClosedRange<UInt16>])
    func aLateChunkOfAValueAMergeReplacedLeavesTheMergeToComplete(protocols: ClosedRange<UInt16>) async throws {
        let (pair, other, fromPhone, fromOther) = try await SameVersionTransferTests.largeValueAndAnOlderWrite()
        // Every chunk of A is held back on its way to X; X's first hello is kept.
        let toX = Link(pair.phone, pair.watch, protocolRange: protocols)
        let watchStart = toX.b.start(now: toX.now)
        let watchHello = try #require(watchStart.first { frame in
            if case .hello(let hello)? = try? SyncMessage(frame: frame) { !hello.isReply } else { false }
        })
        var valueBefore: [Frame] = []
        toX.run(toX.a.start(now: toX.now), watchStart) { frame in
            guard MergedValueLaneTests.chunk(in: frame) != nil else { return false }
            valueBefore.append(frame)
            return true
        }
        #expect(valueBefore.count >= 4)
        toX.run(Array(valueBefore.prefix(2)), [])
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == nil)
        // Y's write reaches the phone, which merges it in at A's version.
        Link(pair.phone, other).connect()
        let merged = try #require(try pair.phone.rawValue(forKey: TestKeys.tags.name))
        // The late copy of X's hello: the phone's session starts over, and ends rather than send B.
        var merge: [Frame] = []
        let keepMerge = { (frame: Frame) -> Bool in
            // (The error the phone ends its session with stays with it: X plays the peer of an older build's.)
            if frame.type == SyncMessage.MessageType.error.rawValue { return true }
            guard let chunk = MergedValueLaneTests.chunk(in: frame) else { return false }
            if chunk.totalChecksum == Checksum.crc32(merged) { merge.append(frame) }
            return true
        }
        toX.run([], [watchHello], droppingToB: keepMerge)
        #expect(toX.a.failure?.code == .closed)
        #expect(merge.isEmpty)
        // B's chunks as an older build would send them, taken from a session toward a new watch.
        let third = try SyncStore(path: pair.folder.file("watch-z.sqlite"), role: .watch, registry: try TestKeys.registry(),
                                  options: StoreOptions(clock: ManualClock(), encryption: .keyFile(path: pair.folder.file("watch-z.key"))))
        let toZ = Link(pair.phone, third, protocolRange: protocols)
        toZ.run(toZ.a.start(now: toZ.now), toZ.b.start(now: toZ.now), droppingToB: keepMerge)
        try #require(merge.count >= 4)
        // B's first chunk, a late copy of A's third, then the rest of B.
        toX.run([merge[0]], [])
        toX.run([valueBefore[2]], [])
        toX.run(Array(merge.dropFirst()), [])
        toX.settle()
        #expect(toX.b.failure == nil)
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone + fromOther))
        // The next session of this build's phone has nothing more to send.
        toX.b.connectionLost()
        let again = Link(pair.phone, pair.watch, protocolRange: protocols)
        again.connect()
        #expect(again.a.failure == nil && again.b.failure == nil && again.a.isIdle && again.b.isIdle)
    }
}

extension SameVersionTransferTests {
    /// In a session of protocol 4 or older a chunk acknowledgement names key,
    /// version and index only. The phone's large value A reaches watch X whole;
    /// watch Y's write reaches the phone, which merges it in at A's version
    /// (value B). A copy of X's last acknowledgement of A (a lossy link
    /// duplicates) arrives once B's chunks are on their way, and B's chunk of
    /// that index is lost. The phone does not send a second value of a version
    /// in one such session: it ends it, and the next one sends B whole. Before,
    /// the copy was taken for B's chunk (complete: the transfer ended), and the
    /// session stayed open without X ever getting B (fuzz seed 407002756).
    @Test(arguments: [1...1, 1...4] as [ClosedRange<UInt16>])
    func aSecondValueOfAVersionWaitsForTheNextSessionOfAnOlderProtocol(protocols: ClosedRange<UInt16>) async throws {
        let (pair, other, fromPhone, fromOther) = try await SameVersionTransferTests.largeValueAndAnOlderWrite()
        let toX = Link(pair.phone, pair.watch, protocolRange: protocols)
        toX.connect()
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == Set(fromPhone))
        let lastAck = try #require(toX.frames.last { from, frame in
            if from == "b", case .chunkAck(let ack)? = try? SyncMessage(frame: frame) { ack.complete } else { false }
        }?.frame)
        guard case .chunkAck(let acknowledged)? = try? SyncMessage(frame: lastAck) else {
            Issue.record("not a chunk acknowledgement")
            return
        }
        // Y's write reaches the phone, which merges it in at A's version; B's chunks are held back.
        Link(pair.phone, other).connect()
        try pair.phone.requestManualSync()
        var merge: [SyncMessage.Chunk] = []
        var mergeFrames: [Frame] = []
        toX.run(toX.a.pump(now: toX.now), []) { frame in
            guard let chunk = MergedValueLaneTests.chunk(in: frame) else { return false }
            merge.append(chunk)
            mergeFrames.append(frame)
            return true
        }
        // The copy of A's last acknowledgement, then B's chunks but the one of that index.
        toX.run([], [lastAck])
        toX.run(zip(merge, mergeFrames).filter { $0.0.index != acknowledged.index }.map(\.1), [])
        toX.settle()
        let complete = Set(fromPhone + fromOther)
        let received = Set(try pair.watch.storedValue(for: TestKeys.tags) ?? [])
        #expect(toX.a.failure != nil || received == complete, "the session neither ended nor brought the merge")
        // The next session brings it.
        toX.a.connectionLost()
        toX.b.connectionLost()
        let again = Link(pair.phone, pair.watch, protocolRange: protocols)
        again.connect()
        #expect(again.a.failure == nil && again.b.failure == nil)
        #expect(Set(try pair.watch.storedValue(for: TestKeys.tags) ?? []) == complete)
        #expect(again.a.isIdle && again.b.isIdle)
    }
}

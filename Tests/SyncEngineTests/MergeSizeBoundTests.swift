import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A resolver's merge larger than the store's `maxValueSize` (a value `set`
/// refuses, and the peer refuses on the wire) is not kept: the two writes
/// resolve by last writer wins, the same way on both devices, and the
/// conflict says why (`merge-too-large`).
///
/// The rule is checked by its raw value, so that these tests build (and fail)
/// on an engine without it.
@Suite(.timeLimit(.minutes(5))) struct MergeSizeBoundTests {
    /// Each side's list alone fits; their union (about 2,700 bytes) does not.
    static let limit = 2_000
    static func items(_ prefix: String) -> [String] { (0..<40).map { "\(prefix)-item-\(1000 + $0)-of-the-list" } }
    static let phoneTags = items("phone")
    static let watchTags = items("watch")
    static func json(_ tags: [String]) throws -> [UInt8] { try TestKeys.tags.serializer.encode(tags) }

    // MARK: the merge rule, as the planner of both the live and the queued paths uses it

    static func context(limit: Int) -> ApplyPlanner.Context {
        ApplyPlanner.Context(peerRole: .watch, mismatched: [], versionBound: .max, now: 0, maxValueSize: limit)
    }

    /// The state `incoming` leaves on a device that held `local`, and the step's verdict.
    static func apply(_ incoming: EntryState, over local: EntryState, limit: Int) throws -> (state: EntryState, verdict: ApplyPlan.Verdict) {
        let entry = WireEntry(key: TestKeys.tags.name, version: incoming.version, base: incoming.base, deleted: false, encoding: "json",
                              value: incoming.value)
        let plan = ApplyPlanner.plan([entry], local: [TestKeys.tags.name: local], registry: try KeyRegistry([TestKeys.tags]),
                                     context: context(limit: limit))
        let verdict = try #require(plan.steps.first?.verdict)
        switch verdict {
        case .take: return (incoming, verdict)
        case .merge(let value, let version, let base, _): return (EntryState(version: version, base: base, deleted: false, value: value), verdict)
        case .ignore, .refuse: return (local, verdict)
        }
    }

    @Test func aMergeOverTheLimitResolvesByLastWriterWinsAlikeOnBothSides() throws {
        let older = EntryState(version: HLCTimestamp(physicalMilliseconds: 1_000, counter: 0, node: 1), base: .zero, deleted: false,
                               value: try Self.json(Self.phoneTags))
        let newer = EntryState(version: HLCTimestamp(physicalMilliseconds: 2_000, counter: 0, node: 2), base: .zero, deleted: false,
                               value: try Self.json(Self.watchTags))
        #expect(try Self.json(Self.phoneTags + Self.watchTags).count > Self.limit)
        // The device that wrote the older value receives the newer one, and the other way round.
        let atOlder = try Self.apply(newer, over: older, limit: Self.limit)
        let atNewer = try Self.apply(older, over: newer, limit: Self.limit)
        #expect(atOlder.state == newer && atNewer.state == newer, "both keep the later write")
        #expect(atOlder.verdict.conflict?.winner == .remote && atOlder.verdict.conflict?.rule.rawValue == "merge-too-large")
        #expect(atNewer.verdict.conflict?.winner == .local && atNewer.verdict.conflict?.rule.rawValue == "merge-too-large")
        // A merge within the limit still merges, on both sides.
        let roomy = Self.limit * 10
        let mergedAtOlder = try Self.apply(newer, over: older, limit: roomy)
        let mergedAtNewer = try Self.apply(older, over: newer, limit: roomy)
        #expect(mergedAtOlder.state == mergedAtNewer.state)
        #expect(mergedAtOlder.state.value == (try Self.json(Self.phoneTags + Self.watchTags)))
        #expect(mergedAtOlder.verdict.conflict?.rule == .resolver)
        // Exactly at the limit is what `set` accepts: still merged.
        let exact = try #require(mergedAtOlder.state.value?.count)
        if case .merge = try Self.apply(newer, over: older, limit: exact).verdict {} else { Issue.record("a merge of exactly the limit was not kept") }
    }

    /// Two values of one version (left by merges elsewhere) whose join is over
    /// the limit: each device keeps the same one of them, never the join.
    @Test func twoValuesOfOneVersionWhoseJoinIsTooLargeMeetOnTheSameOne() throws {
        let version = HLCTimestamp(physicalMilliseconds: 2_000, counter: 0, node: 2)
        let a = EntryState(version: version, base: version, deleted: false, value: try Self.json(Self.phoneTags))
        let b = EntryState(version: version, base: version, deleted: false, value: try Self.json(Self.watchTags))
        let atA = try Self.apply(b, over: a, limit: Self.limit)
        let atB = try Self.apply(a, over: b, limit: Self.limit)
        #expect(atA.state == atB.state)
        #expect((atA.state.value?.count ?? 0) <= Self.limit)
    }

    // MARK: two stores syncing

    /// The phone and the watch each add to the list while apart; the union is
    /// over both stores' limit. Connected, both keep the later write (not a
    /// value `set` would refuse), log why, and nothing is refused on the wire.
    @Test(arguments: [true, false])
    func concurrentListsWhoseUnionIsTooLargeConvergeOnTheLastWriter(watchWritesLast: Bool) async throws {
        let pair = try Pair { $0.maxValueSize = Self.limit }
        let winner = try await Self.writeConcurrently(pair, watchWritesLast: watchWritesLast)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        try Self.expectConverged(pair, on: winner, watchWritesLast: watchWritesLast)
        let acks = link.frames.compactMap { try? SyncMessage(frame: $0.frame) }.compactMap(\.asAck)
        #expect(!acks.isEmpty && acks.allSatisfy(\.rejected.isEmpty), "\(acks.flatMap(\.rejected))")
    }

    /// The same over running peers, in memory and over TCP on 127.0.0.1.
    @Test(arguments: LinkKind.allCases)
    func overRunningPeers(over kind: LinkKind) async throws {
        let pair = try Pair { $0.maxValueSize = Self.limit }
        let winner = try await Self.writeConcurrently(pair, watchWritesLast: true)
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            try await eventually(pair.phone, "the watch's list on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == winner }
            try await eventually(pair.watch, "the watch's list kept on the watch") { try pair.watch.storedValue(for: TestKeys.tags) == winner }
            try await phone.waitUntilIdle(timeout: waitLimit)
            try await watch.waitUntilIdle(timeout: waitLimit)
        }
        try Self.expectConverged(pair, on: winner, watchWritesLast: true)
    }

    /// The same through queued delivery (a mailbox directory), which applies with the same planner.
    @Test func throughQueuedDelivery() async throws {
        let pair = try Pair { $0.maxValueSize = Self.limit }
        let winner = try await Self.writeConcurrently(pair, watchWritesLast: false)
        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config)
        let watch = SyncPeer(store: pair.watch, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pair.pairing)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pair.pairing)
        var quiet = false
        for _ in 0..<20 where !quiet {
            // The watch posts its (earlier) list before it reads the phone's: each side meets the other's.
            let rounds = [try watch.deliverQueued(through: watchBox), try phone.deliverQueued(through: phoneBox)]
            for round in rounds { #expect(round.refused.isEmpty && round.failure == nil, "\(round)") }
            quiet = rounds.allSatisfy { $0.messagesRead == 0 && $0.messagesPosted == 0 }
        }
        #expect(quiet, "queued delivery came to rest")
        try Self.expectConverged(pair, on: winner, watchWritesLast: false)
    }

    /// Writes the phone's and the watch's lists concurrently (neither saw the
    /// other's); returns the later one.
    static func writeConcurrently(_ pair: Pair, watchWritesLast: Bool) async throws -> [String] {
        if watchWritesLast {
            try await pair.phone.set(phoneTags, for: TestKeys.tags)
            pair.watchClock.advance(by: 5)
            try await pair.watch.set(watchTags, for: TestKeys.tags)
        } else {
            try await pair.watch.set(watchTags, for: TestKeys.tags)
            pair.phoneClock.advance(by: 5)
            try await pair.phone.set(phoneTags, for: TestKeys.tags)
        }
        // What the app itself could not store: the union.
        await #expect(throws: SyncError.self) { try await pair.phone.set(phoneTags + watchTags, for: TestKeys.tags) }
        return watchWritesLast ? watchTags : phoneTags
    }

    static func expectConverged(_ pair: Pair, on winner: [String], watchWritesLast: Bool,
                                sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == winner, sourceLocation: sourceLocation)
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == winner, sourceLocation: sourceLocation)
        let phoneEntry = try #require(try pair.phone.entryInfo(forKey: TestKeys.tags.name), sourceLocation: sourceLocation)
        let watchEntry = try #require(try pair.watch.entryInfo(forKey: TestKeys.tags.name), sourceLocation: sourceLocation)
        #expect(phoneEntry.version == watchEntry.version, sourceLocation: sourceLocation)
        for store in [pair.phone, pair.watch] {
            let log = try store.conflictLog()
            #expect(log.count == 1 && log.first?.rule.rawValue == "merge-too-large", "\(log)", sourceLocation: sourceLocation)
            let wonHere = (store === pair.watch) == watchWritesLast
            #expect(log.first?.winner == (wonHere ? .local : .remote), sourceLocation: sourceLocation)
            #expect(store.syncCounters.entriesRejected == 0, "nothing refused on the wire", sourceLocation: sourceLocation)
        }
    }
}

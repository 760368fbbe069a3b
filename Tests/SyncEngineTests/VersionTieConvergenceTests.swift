@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Versions at their edges and ties, as a buggy or hostile peer may send
/// them: every store that receives the same entries, in any order, in one
/// batch or several, keeps the same value at the same version.
@Suite(.timeLimit(.minutes(5))) struct VersionTieConvergenceTests {
    private static let key = TestKeys.steps.name

    private static func entry(_ packed: Int64, node: UInt32, deleted: Bool = false, value: String = "1",
                              base: HLCTimestamp = .zero) -> WireEntry {
        WireEntry(key: key, version: HLCTimestamp(packed: packed, node: node), base: base, deleted: deleted,
                  encoding: "json", value: deleted ? nil : Array(value.utf8))
    }

    /// What a fresh watch store keeps of `key` after `batches`, applied in order.
    private static func outcome(_ batches: [[WireEntry]], folder: TempFolder, name: String) throws -> (value: [UInt8]?, version: HLCTimestamp?, deleted: Bool?) {
        let store = try SyncStore(path: folder.file(name), role: .watch, registry: try KeyRegistry([TestKeys.steps]),
                                  options: StoreOptions(clock: ManualClock()))
        defer { store.close() }
        for batch in batches { _ = try store.applyRemote(batch, peerRole: .phone, mismatched: []) }
        let info = try store.allEntryInfo().first { $0.key == key }
        return (try store.encodedValue(forKey: key), info?.version, info?.isDeleted)
    }

    /// Every order of `entries`, one per batch and all in one batch, ends alike.
    private static func expectConvergence(_ entries: [WireEntry], _ comment: Comment) throws {
        let folder = TempFolder()
        var orders: [[WireEntry]] = [entries, entries.reversed()]
        if entries.count == 3 { orders += [[entries[1], entries[0], entries[2]], [entries[2], entries[0], entries[1]]] }
        var outcomes: [String] = []
        for (i, order) in orders.enumerated() {
            for (j, batches) in [order.map { [$0] }, [order]].enumerated() {
                let o = try outcome(batches, folder: folder, name: "s\(i)-\(j)")
                outcomes.append("\(o.value.map { String(decoding: $0, as: UTF8.self) } ?? "nil") \(o.version?.description ?? "-") \(o.deleted ?? false)")
            }
        }
        #expect(Set(outcomes).count == 1, "\(comment): \(outcomes)")
    }

    @Test func aDeleteAndAWriteAtTheSameTimeFromTwoNodesConverge() throws {
        let t = HLCTimestamp(physicalMilliseconds: 1_700_000_000_000, counter: 5, node: 0).packed
        try Self.expectConvergence([Self.entry(t, node: 1, deleted: true), Self.entry(t, node: 2, value: "9")], "delete on the lower node")
        try Self.expectConvergence([Self.entry(t, node: 2, deleted: true), Self.entry(t, node: 1, value: "9")], "delete on the higher node")
    }

    /// One version (time and node) with two contents: only a merge makes one
    /// honestly, a buggy peer may send any. The tie-break is on content.
    @Test func oneVersionWithTwoContentsConverges() throws {
        let t = HLCTimestamp(physicalMilliseconds: 1_700_000_000_000, counter: 0, node: 0).packed
        try Self.expectConvergence([Self.entry(t, node: 3, deleted: true), Self.entry(t, node: 3, value: "4")], "a delete and a write")
        try Self.expectConvergence([Self.entry(t, node: 3, value: "12"), Self.entry(t, node: 3, value: "4")], "two values")
        try Self.expectConvergence([Self.entry(t, node: 3, value: "12"), Self.entry(t, node: 3, value: "4"),
                                    Self.entry(t, node: 3, deleted: true)], "two values and a delete")
    }

    /// A key twice or three times in one batch, at versions out of order.
    @Test func aKeyRepeatedInABatchConverges() throws {
        let t = HLCTimestamp(physicalMilliseconds: 1_700_000_000_000, counter: 0, node: 0).packed
        try Self.expectConvergence([Self.entry(t + 5, node: 1, value: "5"), Self.entry(t + 3, node: 2, value: "3"),
                                    Self.entry(t + 4, node: 1, deleted: true)], "three versions")
    }

    /// Versions at the edges: zero, the largest the bound lets through right
    /// now, node ids 0 and `UInt32.max`; nothing traps, and stores agree.
    @Test func edgeVersionsConverge() throws {
        let bound = SyncStore.versionBound(now: ManualClock().nowMilliseconds(), ahead: StoreOptions().maxRemoteClockAhead)
        try Self.expectConvergence([Self.entry(0, node: 0, value: "1"), Self.entry(0, node: UInt32.max, value: "2")], "time zero")
        try Self.expectConvergence([Self.entry(bound, node: UInt32.max, value: "3"), Self.entry(bound, node: 0, deleted: true),
                                    Self.entry(bound - 1, node: UInt32.max, value: "4")], "at the bound")
    }

    /// An entry that carries this store's own node id and a time above its
    /// clock: the store takes it, and its next write orders after it.
    @Test func anEntryWithOurNodeIDMovesTheClockAndLaterWritesWin() async throws {
        let pair = try Pair()
        let now = pair.watchClock.nowMilliseconds()
        let ours = HLCTimestamp(physicalMilliseconds: now + 60_000, counter: UInt16.max, node: pair.watch.nodeID)
        _ = try pair.watch.applyRemote([Self.entry(ours.packed, node: ours.node, value: "8")], peerRole: .phone, mismatched: [])
        #expect(try await pair.watch.get(TestKeys.steps) == 8)
        try await pair.watch.set(9, for: TestKeys.steps)
        let info = try #require(try pair.watch.entryInfo(forKey: Self.key))
        #expect(info.version > ours)
        #expect(try await pair.watch.get(TestKeys.steps) == 9)
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.phone.get(TestKeys.steps) == 9)
    }
}

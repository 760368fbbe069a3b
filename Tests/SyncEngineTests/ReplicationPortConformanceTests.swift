import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A store behind a `ReplicationPort`, with what a test needs beside the
/// port: local writes, stored states, the conflict log.
final class PortFixture {
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        /// SQLite, values in the rows; SQLite metadata with a file per value (`FileValueStore`); dictionaries.
        case sqlite, fileValue, memory
        var testDescription: String { rawValue }
    }

    let port: any ReplicationPort
    let clock: ManualClock
    let writeLocal: (String, [UInt8]?) throws -> Void
    let state: (String) throws -> EntryState?
    let conflicts: () throws -> [ConflictRecord]
    private let keepAlive: [AnyObject]

    init(_ kind: Kind, role: DeviceRole = .phone, keys: [any KeyDeclaration] = TestKeys.all) throws {
        let registry = try KeyRegistry(keys)
        let clock = ManualClock()
        self.clock = clock
        switch kind {
        case .sqlite:
            let folder = TempFolder()
            let store = try SyncStore(path: folder.file("store.sqlite"), role: role, registry: registry,
                                      options: StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("store.key"))))
            port = SQLiteReplicationPort(store)
            writeLocal = { key, bytes in try store.commit([BackendWrite(key: key, bytes: bytes)]) }
            state = { key in try store.database.read { conn in try store.loadRow(conn, key: key)?.state } }
            conflicts = { try store.conflictLog().reversed() }
            keepAlive = [folder, store]
        case .fileValue:
            let folder = TempFolder()
            let files = try FileValueStore(directory: folder.file("values"), role: role, registry: registry,
                                           options: StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("store.key"))))
            let store = files.syncStore
            port = SQLiteReplicationPort(store)
            writeLocal = { key, bytes in try files.commit([BackendWrite(key: key, bytes: bytes)]) }
            state = { key in try store.database.read { conn in try store.loadRow(conn, key: key)?.state } }
            conflicts = { try store.conflictLog().reversed() }
            keepAlive = [folder, files]
        case .memory:
            let memory = InMemoryReplicationPort(node: 0x1234, role: role, registry: registry, clock: clock)
            port = memory
            writeLocal = { key, bytes in try memory.write(key, bytes) }
            state = { key in memory.state(key) }
            conflicts = { memory.conflictLog }
            keepAlive = [memory]
        }
    }

    /// Applies `entries` from `peer` as a session does: planned by `ApplyPlanner`, executed by the port.
    func apply(_ entries: [WireEntry], from peer: UInt32, role peerRole: DeviceRole = .watch, mismatched: Set<String> = [],
               completing: ChunkedVersion? = nil, passingOver: Int64? = nil) throws -> (plan: ApplyPlan, outcome: ApplyOutcome) {
        let context = ApplyPlanner.Context(peerRole: peerRole, mismatched: mismatched, versionBound: port.versionBound(),
                                           now: port.nowMilliseconds(), maxValueSize: port.maxValueSize)
        var plan = ApplyPlan()
        let registry = port.registry
        let outcome = try port.apply(entries, from: peer, completing: completing, durable: true, receivedThrough: nil,
                                     passingOver: passingOver) { local in
            plan = ApplyPlanner.plan(entries, local: local, registry: registry, context: context)
            return plan
        }
        return (plan, outcome)
    }

    func json<T: Encodable>(_ value: T) -> [UInt8] { Array(try! JSONEncoder().encode(value)) }

    func entry(_ key: String, _ value: [UInt8]?, at milliseconds: Int64, node: UInt32, base: HLCTimestamp = .zero) -> WireEntry {
        WireEntry(key: key, version: HLCTimestamp(physicalMilliseconds: milliseconds, counter: 0, node: node), base: base,
                  deleted: value == nil, encoding: port.registry.descriptor(forEntry: key)?.encoding ?? "json", value: value)
    }
}

/// One contract, three stores: every test runs over the SQLite port (values in rows, and a file
/// per value as `FileValueStore` keeps them) and the in-memory port.
@Suite struct ReplicationPortConformanceTests {
    static let watchNode: UInt32 = 0x77
    static let otherWatch: UInt32 = 0x88

    @Test(arguments: PortFixture.Kind.allCases)
    func planVerdictsAreExecuted(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let steps = TestKeys.steps.name, tags = TestKeys.tags.name
        try f.writeLocal(steps, f.json(1))
        try f.writeLocal(tags, f.json(["a"]))
        let now = f.clock.nowMilliseconds()
        let localSteps = try #require(try f.state(steps)).version
        let fresh = f.entry(TestKeys.daily["x"].name, f.json(5), at: now - 1, node: Self.watchNode)
        let entries = [
            fresh,
            f.entry("nope", f.json(1), at: now, node: Self.watchNode),                                   // unknown key
            f.entry(TestKeys.token.name, f.json("t"), at: now, node: Self.watchNode),                    // phone-only: the watch may not send it
            f.entry(TestKeys.daily["late"].name, f.json(1), at: now + 7_200_000, node: Self.watchNode),   // two hours ahead
            f.entry(tags, f.json(["b"]), at: now + 5, node: Self.watchNode),                             // concurrent: merged
            f.entry(steps, f.json(9), at: now - 10, node: Self.watchNode),                               // concurrent, older: local wins
        ]
        let (plan, outcome) = try f.apply(entries, from: Self.watchNode)
        let verdicts = plan.steps.map(\.verdict)
        #expect(verdicts[0] == .take(nil))
        #expect(verdicts[1] == .refuse(code: "unknown-key", versionRefusal: nil))
        #expect(verdicts[2] == .refuse(code: ApplyPlanner.policyViolation, versionRefusal: nil))
        guard case .refuse("version-out-of-range", let refusal?) = verdicts[3] else {
            Issue.record("expected a version refusal, got \(verdicts[3])")
            return
        }
        #expect(refusal.aheadMilliseconds == 7_200_000)
        guard case .merge(let merged, let mergedVersion, _, let conflict?) = verdicts[4] else {
            Issue.record("expected a merge, got \(verdicts[4])")
            return
        }
        #expect(try JSONDecoder().decode([String].self, from: Data(merged)) == ["a", "b"])
        #expect(mergedVersion == entries[4].version)
        #expect(conflict.winner == .merged)
        #expect(verdicts[5] == .ignore(.init(local: localSteps, winner: .local, rule: .lastWriterWins)))
        #expect(plan.applied == 2 && plan.ignored == 1 && plan.rejected.count == 3)

        // Executed: taken and merged stored, the rest untouched, both conflicts logged once.
        #expect(try f.state(fresh.key) == fresh.state)
        #expect(try f.state(tags)?.value == merged)
        #expect(try f.state(steps)?.version == localSteps)
        #expect(try f.state(TestKeys.token.name) == nil)
        #expect(try f.state(TestKeys.daily["late"].name) == nil)
        #expect(outcome.changes.map(\.key) == [fresh.key, tags])
        #expect(outcome.conflicts.map(\.key) == [tags, steps])
        #expect(try f.conflicts().map(\.winner) == [ConflictWinner.merged, .local])

        // A duplicate delivery is ignored, changes nothing and logs nothing again.
        let (again, repeated) = try f.apply([fresh, entries[5]], from: Self.watchNode)
        #expect(again.applied == 0 && again.ignored == 2)
        #expect(repeated.conflicts.isEmpty && repeated.changes.isEmpty)
        #expect(try f.conflicts().count == 2)

        // Keys declared differently by the peer are refused.
        let (mismatched, _) = try f.apply([f.entry(TestKeys.daily["y"].name, f.json(1), at: now, node: Self.watchNode)],
                                          from: Self.watchNode, mismatched: [TestKeys.daily.descriptor.name])
        #expect(mismatched.rejected == [.init(key: TestKeys.daily["y"].name, code: "key-declaration-mismatch")])
        #expect(try f.state(TestKeys.daily["y"].name) == nil)
    }

    /// A key twice in one batch: the second entry meets the state the first left
    /// (not the stored one), whichever of the two is newer, for a stored key and a new one.
    @Test(arguments: PortFixture.Kind.allCases)
    func aKeyTwiceInOneBatchMeetsWhatTheFirstLeft(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let steps = TestKeys.steps.name, fresh = TestKeys.daily["twice"].name
        try f.writeLocal(steps, f.json(1))
        let now = f.clock.nowMilliseconds()
        let newer = f.entry(steps, f.json(3), at: now + 20, node: Self.watchNode)
        let older = f.entry(steps, f.json(2), at: now + 10, node: Self.watchNode)
        let first = f.entry(fresh, f.json(1), at: now + 1, node: Self.watchNode)
        let second = f.entry(fresh, f.json(2), at: now + 2, node: Self.watchNode)
        let (plan, outcome) = try f.apply([newer, older, first, second], from: Self.watchNode)
        let verdicts = plan.steps.map(\.verdict)
        guard case .take = verdicts[0] else {
            Issue.record("expected the newer entry taken, got \(verdicts[0])")
            return
        }
        // Against the stored value (at `now`) the older entry would be taken; against the newer one it is not.
        guard case .ignore = verdicts[1] else {
            Issue.record("the older entry met the stored state, not the newer entry's: \(verdicts[1])")
            return
        }
        #expect(verdicts[2] == .take(nil))
        guard case .take = verdicts[3] else {
            Issue.record("expected the second entry of a new key taken over the first, got \(verdicts[3])")
            return
        }
        #expect(try f.state(steps) == newer.state)
        #expect(try f.state(fresh) == second.state)
        #expect(outcome.changes.map(\.key) == [steps, fresh, fresh])
    }

    @Test(arguments: PortFixture.Kind.allCases)
    func cursorReadsSkipAcknowledgedChangesAndAcknowledgingMovesTheCursor(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        for (index, key) in [TestKeys.steps.name, TestKeys.units.name, TestKeys.daily["a"].name].enumerated() {
            try f.writeLocal(key, f.json(index))
        }
        let record = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e1")
        #expect(record.cursor == 0)
        let all = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(all.rows.map(\.key) == [TestKeys.steps.name, TestKeys.units.name, TestKeys.daily["a"].name])
        #expect(all.scannedThrough == all.rows[2].seq)
        #expect(try f.port.pendingCount(for: Self.watchNode) == 3)

        try f.port.acknowledge(peer: Self.watchNode, through: all.rows[1].seq)
        let cursor = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e1").cursor
        #expect(cursor == all.rows[1].seq)
        #expect(try f.port.pendingCount(for: Self.watchNode) == 1)
        let rest = try f.port.pendingRows(for: Self.watchNode, after: cursor, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(rest.rows.map(\.key) == [TestKeys.daily["a"].name])

        // Never back; a limit stops the read early; a key that changes again moves to the end.
        try f.port.acknowledge(peer: Self.watchNode, through: all.rows[0].seq)
        #expect(try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e1").cursor == cursor)
        let one = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 1, maxBytes: 1 << 20) { _, _ in false }
        #expect(one.rows.count == 1 && one.scannedThrough == all.rows[0].seq)
        try f.writeLocal(TestKeys.steps.name, f.json(7))
        let after = try f.port.pendingRows(for: Self.watchNode, after: cursor, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(after.rows.map(\.key) == [TestKeys.daily["a"].name, TestKeys.steps.name])
        // Skipped rows are passed over but scanned.
        let skipped = try f.port.pendingRows(for: Self.watchNode, after: cursor, maxEntries: 100, maxBytes: 1 << 20) { key, _ in
            key == TestKeys.steps.name
        }
        #expect(skipped.rows.map(\.key) == [TestKeys.daily["a"].name] && skipped.scannedThrough == after.rows[1].seq)

        // Another pairing epoch starts over.
        #expect(try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e2").cursor == 0)
    }

    @Test(arguments: PortFixture.Kind.allCases)
    func anEntryIsNeverSentBackToThePeerItCameFrom(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let key = TestKeys.daily["from-watch"].name
        let incoming = f.entry(key, f.json(3), at: f.clock.nowMilliseconds(), node: Self.watchNode)
        #expect(try f.apply([incoming], from: Self.watchNode).plan.applied == 1)
        let back = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(back.rows.isEmpty)
        #expect(back.scannedThrough > 0, "passed over, not left waiting")
        #expect(try f.port.pendingCount(for: Self.watchNode) == 0)
        #expect(try f.port.rows(declaredBy: [TestKeys.daily.descriptor.name], for: Self.watchNode, maxEntries: 10).isEmpty)
        let onward = try f.port.pendingRows(for: Self.otherWatch, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(onward.rows.map(\.entry) == [incoming])
        #expect(try f.port.rows(declaredBy: [TestKeys.daily.descriptor.name], for: Self.otherWatch, maxEntries: 10).map(\.key) == [key])
    }

    /// An apply that adds to the stream only changes taken from `peer`, given
    /// the position the stream ends at and `peer`'s cursor stands at, moves
    /// the cursor past them in its transaction; not when the stream moved on
    /// after that position, and not when anything else joined the stream (a
    /// merge goes back to the peer).
    @Test(arguments: PortFixture.Kind.allCases)
    func anApplyPassesOverWhatItTookForThePeerItCameFrom(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let tags = TestKeys.tags.name
        try f.writeLocal(tags, f.json(["a"]))
        _ = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e")
        func cursor() throws -> Int64 { try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e").cursor }
        let sent = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        try f.port.acknowledge(peer: Self.watchNode, through: sent.scannedThrough)
        let position = try f.port.streamPosition()
        #expect(position == sent.scannedThrough)
        let now = f.clock.nowMilliseconds()

        let taken = try f.apply([f.entry(TestKeys.daily["x"].name, f.json(1), at: now + 1, node: Self.watchNode),
                                 f.entry(TestKeys.daily["y"].name, f.json(2), at: now + 2, node: Self.watchNode)],
                                from: Self.watchNode, passingOver: position)
        let after = try f.port.streamPosition()
        #expect(taken.plan.applied == 2 && after == position + 2)
        #expect(taken.outcome.passedOverThrough == after)
        #expect(try cursor() == after)
        #expect(try f.port.pendingCount(for: Self.watchNode) == 0)
        let onward = try f.port.pendingRows(for: Self.otherWatch, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(onward.rows.map(\.key).contains(TestKeys.daily["x"].name), "still in the stream for the other watches")

        // A local change after the position given: the cursor stays, and the change waits for the watch.
        try f.writeLocal(TestKeys.steps.name, f.json(3))
        let behind = try f.apply([f.entry(TestKeys.daily["z"].name, f.json(3), at: now + 3, node: Self.watchNode)],
                                 from: Self.watchNode, passingOver: after)
        #expect(behind.plan.applied == 1 && behind.outcome.passedOverThrough == nil)
        #expect(try cursor() == after)
        let waiting = try f.port.pendingRows(for: Self.watchNode, after: after, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(waiting.rows.map(\.key) == [TestKeys.steps.name])
        try f.port.acknowledge(peer: Self.watchNode, through: try f.port.streamPosition())

        // A merge is new to the watch: nothing passed over, and the merge waits in the stream for it.
        let here = try f.port.streamPosition()
        let merged = try f.apply([f.entry(tags, f.json(["b"]), at: now + 5, node: Self.watchNode)], from: Self.watchNode, passingOver: here)
        guard case .merge = try #require(merged.plan.steps.first).verdict else {
            Issue.record("expected a merge, got \(merged.plan.steps.map(\.verdict))")
            return
        }
        #expect(merged.outcome.passedOverThrough == nil)
        #expect(try cursor() == here)
        let back = try f.port.pendingRows(for: Self.watchNode, after: here, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(back.rows.map(\.key) == [tags])

        // Without a position, as queued delivery applies: nothing passed over.
        try f.port.acknowledge(peer: Self.watchNode, through: try f.port.streamPosition())
        let plain = try f.apply([f.entry(TestKeys.daily["w"].name, f.json(4), at: now + 6, node: Self.watchNode)], from: Self.watchNode)
        #expect(plain.plan.applied == 1 && plain.outcome.passedOverThrough == nil)
        #expect(try cursor() < f.port.streamPosition())
    }

    /// How far a peer's stream was received (protocol 3): zeros at first,
    /// recorded with a batch or on its own, never moved back.
    @Test(arguments: PortFixture.Kind.allCases)
    func howFarAPeersStreamWasReceivedOnlyMovesOn(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        #expect(try f.port.receivedThrough(from: Self.watchNode) == (0, 0))
        let incoming = f.entry(TestKeys.steps.name, f.json(3), at: f.clock.nowMilliseconds(), node: Self.watchNode)
        _ = try f.port.apply([incoming], from: Self.watchNode, completing: nil, durable: true, receivedThrough: (7, 70)) { _ in ApplyPlan() }
        #expect(try f.port.receivedThrough(from: Self.watchNode) == (7, 70))
        try f.port.recordReceived(from: Self.watchNode, through: 5, anchor: 90)
        #expect(try f.port.receivedThrough(from: Self.watchNode) == (7, 70), "never back")
        try f.port.recordReceived(from: Self.watchNode, through: 12, anchor: 90)
        #expect(try f.port.receivedThrough(from: Self.watchNode) == (12, 90))
        #expect(try f.port.receivedThrough(from: Self.otherWatch) == (0, 0))
    }

    @Test(arguments: PortFixture.Kind.allCases)
    func aNewPeerStartsAtZero(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        try f.writeLocal(TestKeys.steps.name, f.json(1))
        try f.writeLocal(TestKeys.units.name, f.json("imperial"))
        _ = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e")
        let first = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        try f.port.acknowledge(peer: Self.watchNode, through: first.scannedThrough)
        #expect(try f.port.pendingCount(for: Self.watchNode) == 0)

        let record = try f.port.recordPeer(node: Self.otherWatch, role: .watch, epoch: "e")
        #expect(record == PeerRecord(node: Self.otherWatch, cursor: 0, mismatched: []))
        #expect(try f.port.pendingCount(for: Self.otherWatch) == 2)
        let baseline = try f.port.pendingRows(for: Self.otherWatch, after: record.cursor, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(baseline.rows.map(\.key) == [TestKeys.steps.name, TestKeys.units.name])
    }

    /// A phone meeting a node through another pairing than before (a watch
    /// set up from a copy of another watch's store, of a protocol that cannot
    /// take a new node id): the node's pairing is the new one, its cursor
    /// starts over, what came from that node id goes to it too (it may have
    /// come from the other device), and how far its stream was received is
    /// forgotten (the positions were the other device's).
    @Test(arguments: PortFixture.Kind.allCases)
    func aNodeMetThroughAnotherPairingGetsWhatCameFromItsNodeID(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        _ = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "A")
        #expect(try f.port.pairingEpoch(ofPeer: Self.watchNode) == "A")
        #expect(try f.port.pairingEpoch(ofPeer: Self.otherWatch) == nil)
        _ = try f.apply([f.entry(TestKeys.steps.name, f.json(3), at: f.clock.nowMilliseconds(), node: Self.watchNode)], from: Self.watchNode)
        try f.port.recordReceived(from: Self.watchNode, through: 7, anchor: 70)
        let same = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "A")
        #expect(try f.port.pendingRows(for: Self.watchNode, after: same.cursor, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }.rows.isEmpty)

        let moved = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "B")
        #expect(moved.cursor == 0)
        #expect(try f.port.pairingEpoch(ofPeer: Self.watchNode) == "B")
        let baseline = try f.port.pendingRows(for: Self.watchNode, after: 0, maxEntries: 100, maxBytes: 1 << 20) { _, _ in false }
        #expect(baseline.rows.map(\.key) == [TestKeys.steps.name])
        #expect(try f.port.receivedThrough(from: Self.watchNode) == (0, 0))
    }

    /// A watch meeting its phone (the same node) through a new pairing keeps
    /// its cursor and the keys it passed over: the phone holds what it
    /// acknowledged (a phone, by contrast, starts a node it meets through
    /// another pairing over, as it may be another device).
    @Test(arguments: PortFixture.Kind.allCases)
    func aWatchKeepsItsCursorForItsPhoneThroughANewPairing(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind, role: .watch)
        let phone: UInt32 = 0x55
        _ = try f.port.recordPeer(node: phone, role: .phone, epoch: "A")
        try f.port.acknowledge(peer: phone, through: 5)
        try f.port.setMismatchedKeys([TestKeys.steps.name], for: phone)
        let record = try f.port.recordPeer(node: phone, role: .phone, epoch: "B")
        #expect(record == PeerRecord(node: phone, cursor: 5, mismatched: [TestKeys.steps.name]))
        #expect(try f.port.pairingEpoch(ofPeer: phone) == "B")
    }

    /// A watch takes a new node id once: not 0, not a peer's, and a second
    /// request naming the old one keeps the new one (another process took it).
    @Test(arguments: PortFixture.Kind.allCases)
    func aWatchTakesANewNodeIDOnce(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind, role: .watch)
        let old = f.port.nodeID
        _ = try f.port.recordPeer(node: 0x55, role: .phone, epoch: "e")
        let renewed = try f.port.renewNodeID(replacing: old)
        #expect(renewed != old && renewed != 0 && renewed != 0x55 && renewed != MailboxReplicator.unknownPeer)
        #expect(f.port.nodeID == renewed)
        #expect(try f.port.renewNodeID(replacing: old) == renewed)
    }

    @Test(arguments: PortFixture.Kind.allCases)
    func mismatchedKeysAreRecordedPerPeerAndEpoch(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        try f.writeLocal(TestKeys.daily["a"].name, f.json(1))
        try f.writeLocal(TestKeys.steps.name, f.json(2))
        _ = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e")
        try f.port.setMismatchedKeys([TestKeys.daily.descriptor.name], for: Self.watchNode)
        #expect(try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e").mismatched == [TestKeys.daily.descriptor.name])
        #expect(try f.port.recordPeer(node: Self.otherWatch, role: .watch, epoch: "e").mismatched == [])
        // The repair read: every change of the names, whatever the cursor.
        try f.port.acknowledge(peer: Self.watchNode, through: Int64.max / 2)
        #expect(try f.port.rows(declaredBy: [TestKeys.daily.descriptor.name], for: Self.watchNode, maxEntries: 10).map(\.key) == [TestKeys.daily["a"].name])
        try f.port.setMismatchedKeys([], for: Self.watchNode)
        #expect(try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e").mismatched == [])
        // The registries a live session compared go with them, and a new pairing forgets both.
        let registries = [UInt8](repeating: 1, count: 32) + [UInt8](repeating: 2, count: 32)
        try f.port.recordRegistries(registries, for: Self.watchNode)
        #expect(try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "e").registries == registries)
        try f.port.setMismatchedKeys([TestKeys.steps.name], for: Self.watchNode)
        let newPairing = try f.port.recordPeer(node: Self.watchNode, role: .watch, epoch: "other")
        #expect(newPairing.mismatched == [])
        #expect(newPairing.registries == nil)
    }

    @Test(arguments: PortFixture.Kind.allCases)
    func chunksStageResumeAssembleAndComplete(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let bytes = (0..<30).map { UInt8($0) }
        let version = HLCTimestamp(physicalMilliseconds: f.clock.nowMilliseconds(), counter: 0, node: Self.watchNode)
        let entry = WireEntry(key: TestKeys.blob.name, version: version, base: .zero, deleted: false,
                              encoding: TestKeys.blob.descriptor.encoding, value: [])
        func chunk(_ index: Int, _ data: [UInt8]? = nil) -> SyncMessage.Chunk {
            let slice = data ?? Array(bytes[index * 10..<index * 10 + 10])
            return SyncMessage.Chunk(entry: entry, totalSize: 30, totalChecksum: Checksum.crc32(bytes), index: index, count: 3,
                                     checksum: Checksum.crc32(slice), bytes: slice)
        }
        #expect(try f.port.stageChunk(chunk(0)).contiguous == 1)
        #expect(try f.port.stageChunk(chunk(2)).contiguous == 1, "a gap: only chunk 0 counts")
        #expect(try f.port.partialTransfers() == [PartialTransfer(key: entry.key, version: version, received: 1)])
        #expect(throws: SyncError.self) { try f.port.stageChunk(chunk(1, Array(repeating: 0, count: 25))) }
        #expect(try f.port.stageChunk(chunk(1)).contiguous == 3)
        #expect(try f.port.assembleChunks(key: entry.key, version: version) == bytes)

        var complete = entry
        complete.value = bytes
        let (plan, _) = try f.apply([complete], from: Self.watchNode, completing: ChunkedVersion(key: entry.key, version: version))
        #expect(plan.applied == 1)
        #expect(try f.port.partialTransfers().isEmpty)
        #expect(try f.port.localVersion(forKey: entry.key) == version)
        let seq = try #require(try f.port.pendingRows(for: Self.otherWatch, after: 0, maxEntries: 10, maxBytes: 1 << 20) { _, _ in false }.rows.first).seq
        #expect(try f.port.largeValue(key: entry.key, seq: seq) == bytes)
        #expect(try f.port.largeValue(key: entry.key, seq: seq + 1) == nil)

        // Chunks of a version the store already holds are dropped.
        #expect(try f.port.stageChunk(chunk(0)).contiguous == 1)
        try f.port.discardStagedChunks(key: entry.key, through: version)
        #expect(try f.port.partialTransfers().isEmpty)
    }

    /// A resolver's merge gives one version two values: chunks staged for
    /// the other one (another total size or checksum) are replaced, never joined.
    @Test(arguments: PortFixture.Kind.allCases)
    func chunksOfAnotherValueOfTheVersionReplaceThoseStaged(kind: PortFixture.Kind) throws {
        let f = try PortFixture(kind)
        let before = (0..<20).map { UInt8($0) }
        let merged = (0..<20).map { UInt8(100 + $0) }
        let version = HLCTimestamp(physicalMilliseconds: f.clock.nowMilliseconds(), counter: 0, node: Self.watchNode)
        let entry = WireEntry(key: TestKeys.blob.name, version: version, base: .zero, deleted: false,
                              encoding: TestKeys.blob.descriptor.encoding, value: [])
        func chunk(_ index: Int, of value: [UInt8]) -> SyncMessage.Chunk {
            let slice = Array(value[index * 10..<index * 10 + 10])
            return SyncMessage.Chunk(entry: entry, totalSize: 20, totalChecksum: Checksum.crc32(value), index: index, count: 2,
                                     checksum: Checksum.crc32(slice), bytes: slice)
        }
        #expect(try f.port.stageChunk(chunk(0, of: before)) == StagedChunks(contiguous: 1))
        #expect(try f.port.stageChunk(chunk(1, of: merged)) == StagedChunks(contiguous: 0, replacedAnotherValue: true))
        #expect(try f.port.stageChunk(chunk(0, of: merged)) == StagedChunks(contiguous: 2))
        #expect(try f.port.assembleChunks(key: entry.key, version: version) == merged)
    }
}

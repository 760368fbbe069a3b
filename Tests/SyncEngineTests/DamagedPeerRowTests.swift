import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A `sync_peers` row holding what the engine never writes there (a file
/// edited with the `sqlite3` tool): the phone took the watch for one met
/// through another pairing, refused it with `node-id-conflict`, and the watch
/// took a new node id. The damage is reported as such (`database-corrupt`,
/// naming the table and column), the watch keeps its node id, and the row is
/// recorded again under the session's pairing; nothing is lost.
@Suite struct DamagedPeerRowTests {
    /// A session between the pair's stores through pairing `epoch`, driven to
    /// quiet, with the phone's events recorded.
    private static func session(_ pair: Pair, epoch: String) -> (link: Link, phoneReports: RecordingReporter) {
        let configuration = ReplicationConfiguration(pairingEpoch: epoch)
        let reports = RecordingReporter()
        let phone = ReplicationEndpoint(port: SQLiteReplicationPort(pair.phone), reporter: reports, configuration: configuration)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
        let link = Link(endpoints: phone, watch, now: 1_000)
        link.connect()
        return (link, reports)
    }

    private static func refusals(in link: Link) -> [String] {
        link.frames.compactMap { frame -> String? in
            guard case .error(let error)? = try? SyncMessage(frame: frame.frame) else { return nil }
            return error.code
        }
    }

    @Test(arguments: [
        ("epoch", "CAST('pairing A' AS BLOB)"),          // the right bytes, but no text
        ("epoch", "hex(zeroblob(200))"),                // 400 bytes: more than a hello carries
        ("epoch", "CAST(X'70FF' AS TEXT)"),             // not UTF-8
        ("peer_role", "-1"),
        ("peer_role", "'tablet'"),
        ("peer_role", "'phone'"),                       // a phone never pairs with a phone
    ])
    func aDamagedPeerRowIsReportedAsDamageNotANodeIDConflict(column: String, value: String) async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        _ = Self.session(pair, epoch: "pairing A")
        #expect(try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1)
        let watchNode = pair.watch.nodeID

        try pair.reopen(.phone, after: "UPDATE sync_peers SET \(column) = \(value) WHERE peer_node = \(watchNode)")
        try await pair.watch.set(3, for: TestKeys.daily["b"])
        try await pair.phone.set(4, for: TestKeys.steps)

        let (link, reports) = Self.session(pair, epoch: "pairing A")
        #expect(Self.refusals(in: link) == [], "no node-id-conflict")
        #expect(pair.watch.nodeID == watchNode, "the watch keeps its node id")
        let damage = reports.events.compactMap { event -> SyncError? in
            if case .error(let error) = event.event { error } else { nil }
        }
        #expect(damage.map(\.code) == [.databaseCorrupt])
        #expect(damage.first?.message.contains("sync_peers") == true)
        #expect(damage.first?.message.contains("\(column) column") == true)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["b"]) == 3)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 4)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1, "nothing is lost")
        #expect(try pair.phone.pairingEpoch(ofPeer: watchNode) == "pairing A", "the row is recorded again")
        #expect(try pair.phone.knownPeerDetails().map(\.role) == [.watch])
    }

    /// Through the mailbox alone, of a watch that said it takes a new node id
    /// when refused: the damaged epoch is reported, not refused, and the watch
    /// keeps its node id and gets through.
    @Test func throughTheMailboxADamagedEpochIsReportedNotRefused() async throws {
        var pair = try Pair()
        let pairing = PairingSecret.generate()
        let folder = TempFolder()
        let configuration = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        let watch = SyncPeer(store: pair.watch, configuration: configuration)
        /// One round of the watch with the phone; the phone's report.
        func round(_ phone: SyncPeer) throws -> QueuedDeliveryReport {
            _ = try watch.deliverQueued(through: watchBox)
            let report = try phone.deliverQueued(through: phoneBox)
            _ = try watch.deliverQueued(through: watchBox)
            return report
        }
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        for _ in 0..<3 { _ = try round(SyncPeer(store: pair.phone, configuration: configuration)) }
        #expect(try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1)
        #expect(try pair.phone.queuedPeerRenewsNodeID(in: pairing.epoch), "a node of another pairing would be refused")
        let watchNode = pair.watch.nodeID

        try pair.reopen(.phone, after: "UPDATE sync_peers SET epoch = CAST(X'70FF' AS TEXT) WHERE peer_node = \(watchNode)")
        let events = pair.phone.events()
        try await pair.watch.set(3, for: TestKeys.daily["b"])
        let phone = SyncPeer(store: pair.phone, configuration: configuration)
        var refused: [SyncError] = []
        for _ in 0..<3 { refused += try round(phone).refused }
        #expect(refused.isEmpty, "no node-id-conflict")
        #expect(pair.watch.nodeID == watchNode, "the watch keeps its node id")
        #expect(try pair.phone.storedValue(for: TestKeys.daily["b"]) == 3)
        #expect(try pair.phone.pairingEpoch(ofPeer: watchNode) == pairing.epoch, "the row is recorded again")
        let error = try await first(of: events, "the damage's error event") { if case .error = $0 { true } else { false } }
        #expect({ if case .error(let damage) = error { damage.code == .databaseCorrupt && damage.message.contains("epoch column") } else { false } }())
    }

    /// A node met through another pairing, its row intact, is still refused with `node-id-conflict`.
    @Test func anIntactRowOfAnotherPairingIsStillANodeIDConflict() async throws {
        let pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        _ = Self.session(pair, epoch: "pairing A")
        let (link, reports) = Self.session(pair, epoch: "pairing B")
        #expect(Self.refusals(in: link) == [SyncError.Code.nodeIDConflict.rawValue])
        #expect(!reports.events.contains { if case .error(let error) = $0.event { error.code == .databaseCorrupt } else { false } })
    }
}

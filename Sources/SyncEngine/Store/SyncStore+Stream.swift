import Foundation
import SyncTransport

/// What the store keeps about one peer: where its cursor stands in the stream
/// of changes, and which keys it declared differently at the last session.
package struct PeerRecord: Sendable, Equatable {
    var node: UInt32
    /// Every change in the stream up to this sequence was acknowledged by the peer.
    var cursor: Int64
    /// Keys (declaration names) the peer declared differently: their changes are
    /// skipped for it and sent once the declarations agree again.
    var mismatched: Set<String>
    /// This device's registry fingerprint, then the peer's, when they were last
    /// compared (a live session's hellos, or declarations through the mailbox;
    /// nil before): queued messages written with that registry are applied
    /// key by key, passing over `mismatched`.
    var registries: [UInt8]? = nil
}

/// The stream of changes every peer reads from its own cursor.
///
/// A local change gets the next change sequence in its own transaction; an
/// entry applied from a peer does too (so it reaches the other peers), and
/// remembers that peer (`origin_peer`) so it is never sent back to it. A peer
/// reads the changes in lanes that are sent (automatic, released) after its
/// cursor, in sequence order; the latest version of each key only (a key's row
/// carries its newest sequence). Acknowledging moves the peer's cursor: one
/// row per peer in `sync_peers`. A new peer (or a new pairing) starts at 0
/// and so receives everything: a full baseline.
extension SyncStore {
    /// Changes in lanes that are sent, as a condition on `entries e`.
    static let isSentCondition = "e.lane IN (1, 3)"

    // MARK: manual sync

    /// Releases every change made so far in the manual lane (and deferred
    /// automatic values) for sending: they join the stream with new sequence
    /// numbers, after every peer's cursor. Returns how many entries that queues.
    /// Throws `storageFull` while the disk has no room for it.
    @discardableResult
    public func requestManualSync() throws -> Int {
        try checkOpen()
        // A lane pass a full disk put off at open may still move changes written before it into the
        // manual lane: it runs first, so that this sync releases them too (else they waited for the
        // next one). While the disk is still full, this throws, as the app's writes do.
        if lanePassWaits { try runDeferredLanePass() }
        let count = try database.write { conn -> Int in
            let waiting = try conn.statement("SELECT key FROM entries WHERE lane = 2 ORDER BY change_seq, key")
            var keys: [String] = []
            while try waiting.step() { keys.append(waiting.string(0)) }
            waiting.reset()
            let release = try conn.statement("UPDATE entries SET lane = 3, change_seq = ?2 WHERE key = ?1")
            for key in keys {
                release.reset()
                release.bind(1, key)
                release.bind(2, takeSeq())
                try release.run()
            }
            return keys.count
        }
        localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
        localWrites.publish(SyncStore.thisDevice)
        return count
    }

    // MARK: reading the stream

    /// The stream after a cursor (`?1`), values up to `?3` bytes inline: built once, not on every read.
    static let pendingRowsSQL = """
        SELECT e.key, e.change_seq, e.size, e.deleted, e.encoding, e.ver, e.node, e.base_ver, e.base_node, e.encrypted,
               CASE WHEN e.size <= ?3 THEN e.value END, e.in_file, e.origin_peer
        FROM entries e
        WHERE e.change_seq > ?1 AND \(isSentCondition)
        ORDER BY e.change_seq
        """

    /// Changes for `peer` after `cursor`, in sequence order, until `maxEntries`
    /// or `maxBytes`; stops before the second large value. Values of large rows
    /// are not loaded. `scannedThrough` is the sequence the scan reached
    /// (past rows `skip` passed over and rows that came from `peer`).
    /// A change whose value cannot be read now is held (`SyncStore+HeldChanges`)
    /// and scanned past.
    func pendingRows(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int,
                     skip: (String, Int64) -> Bool) throws -> (rows: [OutboundRow], scannedThrough: Int64) {
        var held: [HeldChange] = []
        let read = try database.read { conn -> (rows: [OutboundRow], scannedThrough: Int64) in
            let stmt = try conn.statement(SyncStore.pendingRowsSQL)
            stmt.bind(1, cursor)
            stmt.bind(3, SyncStore.inlineValueLimit)
            defer { stmt.reset() }
            var rows: [OutboundRow] = []
            var bytes = 0
            var scanned = cursor
            while try stmt.step() {
                let key = stmt.string(0)
                let seq = stmt.int64(1)
                if UInt32(truncatingIfNeeded: stmt.int64(12)) == peer || skip(key, seq) || !isSendable(key) {
                    scanned = seq
                    continue
                }
                let size = stmt.byteCount(2)
                let deleted = stmt.int(3) != 0
                let isLarge = !deleted && size > SyncStore.inlineValueLimit
                if isLarge && !rows.isEmpty { break }
                guard let row = try readableOutboundRow(stmt, key: key, seq: seq, size: size, deleted: deleted, isLarge: isLarge,
                                                        for: peer, held: &held) else {
                    scanned = seq
                    continue
                }
                rows.append(row)
                scanned = seq
                bytes += size + key.utf8.count + 32
                if isLarge || rows.count >= maxEntries || bytes >= maxBytes { break }
            }
            return (rows, scanned)
        }
        try holdOrThrow(held, for: peer)
        return read
    }

    /// Notes `held` before the rows read with them are sent; when the notes
    /// cannot be written, throws the first one's read error (nothing is passed over).
    private func holdOrThrow(_ held: [HeldChange], for peer: UInt32?) throws {
        guard let first = held.first else { return }
        do {
            try hold(held, for: peer)
        } catch {
            logger.warning("a value that cannot be read now could not be noted to be sent later", metadata: ["error": "\(error)"])
            throw first.error
        }
    }

    /// Every change in the stream for the keys `names` declares (a key, or a
    /// family's members), whatever the cursor: for a peer whose declarations
    /// of those keys agree again after a mismatch.
    func rows(declaredBy names: Set<String>, for peer: UInt32, maxEntries: Int) throws -> [OutboundRow] {
        guard !names.isEmpty else { return [] }
        var held: [HeldChange] = []
        let read = try database.read { conn -> [OutboundRow] in
            let stmt = try conn.statement("""
                SELECT e.key, e.change_seq, e.size, e.deleted, e.encoding, e.ver, e.node, e.base_ver, e.base_node, e.encrypted,
                       CASE WHEN e.size <= ?1 THEN e.value END, e.in_file, e.origin_peer
                FROM entries e WHERE \(SyncStore.isSentCondition) AND e.origin_peer != ?2 ORDER BY e.change_seq
                """)
            stmt.bind(1, SyncStore.inlineValueLimit)
            stmt.bind(2, Int64(peer))
            defer { stmt.reset() }
            var rows: [OutboundRow] = []
            while try stmt.step(), rows.count < maxEntries {
                let key = stmt.string(0)
                guard isSendable(key), let name = registry.descriptor(forEntry: key)?.name, names.contains(name) else { continue }
                let size = stmt.byteCount(2)
                let deleted = stmt.int(3) != 0
                if let row = try readableOutboundRow(stmt, key: key, seq: stmt.int64(1), size: size, deleted: deleted,
                                                     isLarge: !deleted && size > SyncStore.inlineValueLimit, for: peer, held: &held) {
                    rows.append(row)
                }
            }
            return rows
        }
        try holdOrThrow(held, for: peer)
        return read
    }

    /// Whether a peer accepts `key`'s name. A build before names were bounded
    /// stored longer ones; a batch holding one ended every session (the peer
    /// refuses the whole frame), so such an entry is passed over, and said.
    private func isSendable(_ key: String) -> Bool {
        guard key.utf8.count > KeyName.maxBytes else { return true }
        logger.error("an entry whose key name is too long for any peer is not sent", metadata: [
            "key": "\(PeerText.escaped(String(key.prefix(64))))…", "bytes": "\(key.utf8.count)", "limit": "\(KeyName.maxBytes)",
        ])
        return false
    }

    /// `outboundRow`, or nil for a value that cannot be read, so that one
    /// such value does not stop every other change from going. One that may
    /// read later (its file there but unreadable, or sealed while the store
    /// has no master key: an update dropped `.encrypted` and the key with it)
    /// joins `held`, and is sent once it reads again. One damaged (its
    /// encrypted bytes or its file) is passed over, and said: writing the key
    /// again replaces it and sends the new value.
    private func readableOutboundRow(_ stmt: Statement, key: String, seq: Int64, size: Int, deleted: Bool, isLarge: Bool,
                                     for peer: UInt32, held: inout [HeldChange]) throws -> OutboundRow? {
        do {
            return try outboundRow(stmt, key: key, seq: seq, size: size, deleted: deleted, isLarge: isLarge)
        } catch let error as SyncError {
            if let reason = SyncStore.heldReason(error) {
                held.append(HeldChange(key: key, seq: seq, error: error, reason: reason))
                return nil
            }
            guard [.decryptionFailed, .corruptValueFile].contains(error.code) else { throw error }
            logger.error("a stored value that cannot be read is not sent; write the key again to replace it",
                         metadata: ["key": "\(PeerText.escaped(key))", "error": "\(error)"])
            emit(.error(SyncError(error.code, "key '\(PeerText.escaped(key))' is not sent: \(error.message); write it again to replace it")), peer: peer)
            return nil
        }
    }

    /// One row of the stream queries above, its value decrypted (or read from its file).
    private func outboundRow(_ stmt: Statement, key: String, seq: Int64, size: Int, deleted: Bool, isLarge: Bool) throws -> OutboundRow {
        var value = deleted ? nil : stmt.blob(10)
        let version = HLCTimestamp(packed: stmt.int64(5), node: UInt32(truncatingIfNeeded: stmt.int64(6)))
        if !deleted && !isLarge && stmt.int(11) != 0 {
            value = try readValueFile(key: key, version: version, size: size, encrypted: stmt.int(9) != 0)
        } else if stmt.int(9) != 0, let sealed = value {
            guard let cipher else { throw SyncError(.encryptionKeyMissing, "an encrypted entry cannot be sent without the master key") }
            value = try cipher.open(sealed, keyName: key)
        }
        // A base after the version (stored by a build that kept it so) would be refused by the peer.
        let base = HLCTimestamp(packed: stmt.int64(7), node: UInt32(truncatingIfNeeded: stmt.int64(8)))
        let entry = WireEntry(key: key, version: version, base: HLCTimestamp.base(base, of: version),
                              deleted: deleted, encoding: stmt.string(4), value: value)
        return OutboundRow(key: key, seq: seq, entry: entry, size: size, isLarge: isLarge)
    }

    /// The full (decrypted) value of a large entry, if it is still at `seq`;
    /// nil too for one that cannot be read now, which is held (`SyncStore+HeldChanges`).
    func largeValue(key: String, seq: Int64) throws -> [UInt8]? {
        do {
            return try database.read { conn in
                guard let row = try loadRow(conn, key: key), row.changeSeq == seq, !row.deleted else { return nil }
                return row.value
            }
        } catch let error as SyncError {
            guard let reason = SyncStore.heldReason(error) else { throw error }
            try holdOrThrow([HeldChange(key: key, seq: seq, error: error, reason: reason)], for: nil)
            return nil
        }
    }

    // MARK: peers and cursors

    /// Records that `peer` durably applied every change of the stream up to
    /// `sequence`: its cursor moves there (never back), and it was seen now.
    /// Then purges the tombstones every peer has (at most once a minute).
    func acknowledge(peer: UInt32, through sequence: Int64) throws {
        let now = physicalClock.nowMilliseconds()
        try database.write { conn in
            let stmt = try conn.statement("UPDATE sync_peers SET acked_through = max(acked_through, ?2), last_seen = ?3 WHERE peer_node = ?1")
            stmt.bind(1, Int64(peer))
            stmt.bind(2, sequence)
            stmt.bind(3, now)
            try stmt.run()
        }
        purgeTombstonesIfDue()
    }

    /// Records the peer of a new session and returns what the store knows of
    /// it. A peer seen for the first time, forgotten (`peerHorizon`), or under
    /// another pairing epoch, starts at cursor 0: it receives everything (a full baseline).
    /// A node not known yet is refused (`.tooManyPeers`) while the store keeps
    /// `StoreOptions.maxKnownPeers` others.
    @discardableResult
    func recordPeer(node: UInt32, role: DeviceRole, epoch: String) throws -> PeerRecord {
        let now = physicalClock.nowMilliseconds()
        let limit = max(1, options.maxKnownPeers)
        return try database.write { conn in
            let (knownEpoch, count, refused) = try SyncStore.peerPlace(conn, node: node, limit: limit)
            if refused {
                let remedy = role == .watch
                    ? "a watch unseen for StoreOptions.peerHorizon is forgotten, forgetPeer(_:) forgets one now (knownPeers() lists them), or raise the limit"
                    : "this watch never forgets its phone; open a new store for a newly paired phone, or raise the limit"
                throw SyncError(.tooManyPeers, "the \(self.role) already keeps \(count) peers (StoreOptions.maxKnownPeers = \(limit)); the \(role) with node \(String(node, radix: 16)) is refused: \(remedy)")
            }
            let upsert = try conn.statement("""
                INSERT INTO sync_peers(peer_node, peer_role, epoch, acked_through, last_seen) VALUES(?1, ?2, ?3, 0, ?4)
                ON CONFLICT(peer_node) DO UPDATE SET peer_role = excluded.peer_role, epoch = excluded.epoch, last_seen = excluded.last_seen,
                  acked_through = CASE WHEN sync_peers.epoch = excluded.epoch OR ?5 THEN sync_peers.acked_through ELSE 0 END,
                  mismatched = CASE WHEN sync_peers.epoch = excluded.epoch OR ?5 THEN sync_peers.mismatched ELSE '' END,
                  registries = CASE WHEN sync_peers.epoch = excluded.epoch THEN sync_peers.registries ELSE NULL END
                """)
            upsert.bind(1, Int64(node))
            upsert.bind(2, role.rawValue)
            upsert.bind(3, epoch)
            upsert.bind(4, now)
            // A watch meeting its phone (the same node) through a new pairing keeps its cursor: the
            // phone still holds what it acknowledged, and a re-baseline notice counts it as the
            // phone's (a watch set up from a copy of another's store would otherwise send the other
            // watch's old writes again, among them values the phone deleted and purged since).
            upsert.bind(5, self.role == .watch ? 1 : 0)
            try upsert.run()
            if self.role == .phone, knownEpoch != epoch, try knownEpoch != nil || SyncStore.wasForgotten(conn, node: node) {
                // The node is not known under this pairing: met through another one, or forgotten since
                // it last came (`peerHorizon`, `forgetPeer`). What came from it may have come from
                // another device with its node id (a copied store, under its own pairing, while this one
                // was away), and goes to this one too: the device it came from holds it already, and
                // takes it as such. (A node never met has sent nothing: no entry to look for.)
                let origin = try conn.statement("UPDATE entries SET origin_peer = 0 WHERE origin_peer = ?1")
                origin.bind(1, Int64(node))
                try origin.run()
                // Met through another pairing: how far its stream was received tells nothing of this device's stream.
                if knownEpoch != nil { try SyncStore.deleteMeta(conn, SyncStore.receivedThroughName(node)) }
            }
            let returned = try conn.statement("DELETE FROM sync_forgotten_peers WHERE peer_node = ?1")
            returned.bind(1, Int64(node))
            try returned.run()
            // A forgotten watch back: the keys it declared differently stay remembered. Messages
            // posted before it was forgotten passed over their changes, and their acknowledgements
            // may move its new cursor past them: those changes go once the registries agree.
            let saved = SyncStore.forgottenMismatchedMeta(node)
            let restore = try conn.statement("""
                UPDATE sync_peers SET mismatched = (SELECT value FROM sync_meta WHERE name = ?2)
                WHERE peer_node = ?1 AND mismatched = '' AND EXISTS (SELECT 1 FROM sync_meta WHERE name = ?2)
                """)
            restore.bind(1, Int64(node))
            restore.bind(2, saved)
            try restore.run()
            try SyncStore.deleteMeta(conn, saved)
            // And the registries compared with it, unless compared since.
            if let registries = try SyncStore.forgottenRegistries(conn, node: node) {
                let restore = try conn.statement("UPDATE sync_peers SET registries = ?2 WHERE peer_node = ?1 AND registries IS NULL")
                restore.bind(1, Int64(node))
                restore.bind(2, registries)
                try restore.run()
                try SyncStore.deleteMeta(conn, SyncStore.forgottenRegistriesMeta(node))
            }
            return try SyncStore.peerRecord(conn, node: node) ?? PeerRecord(node: node, cursor: 0, mismatched: [])
        }
    }

    /// The `sync_meta` name that keeps a forgotten peer's keys declared differently.
    static func forgottenMismatchedMeta(_ node: UInt32) -> String { "forgotten_mismatched_\(node)" }
    /// The `sync_meta` name that keeps the registries compared with a forgotten peer (hex).
    static func forgottenRegistriesMeta(_ node: UInt32) -> String { "forgotten_registries_\(node)" }

    /// The registries (`PeerRecord.registries`) compared with `node` before this store forgot it.
    func forgottenRegistries(of node: UInt32) throws -> [UInt8]? {
        try database.read { conn in try SyncStore.forgottenRegistries(conn, node: node) }
    }

    static func forgottenRegistries(_ conn: SQLiteConnection, node: UInt32) throws -> [UInt8]? {
        let stmt = try conn.statement("SELECT value FROM sync_meta WHERE name = ?1")
        stmt.bind(1, forgottenRegistriesMeta(node))
        defer { stmt.reset() }
        guard try stmt.step() else { return nil }
        return bytes(hex: stmt.string(0))
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
    }

    /// The bytes of `hex` (nil when it is not an even run of hex digits).
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for i in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[i...i + 1], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }

    /// Remembers the keys `peer` declares differently (their changes wait for it).
    func setMismatchedKeys(_ names: Set<String>, for peer: UInt32) throws {
        try database.write { conn in
            let stmt = try conn.statement("UPDATE sync_peers SET mismatched = ?2 WHERE peer_node = ?1")
            stmt.bind(1, Int64(peer))
            stmt.bind(2, names.sorted().joined(separator: "\n"))
            try stmt.run()
        }
    }

    /// Remembers the two registries (`PeerRecord.registries`) a live session with `peer` compared.
    func recordRegistries(_ registries: [UInt8], for peer: UInt32) throws {
        try database.write { conn in
            let stmt = try conn.statement("UPDATE sync_peers SET registries = ?2 WHERE peer_node = ?1")
            stmt.bind(1, Int64(peer))
            stmt.bind(2, registries)
            try stmt.run()
        }
    }

    static func peerRecord(_ conn: SQLiteConnection, node: UInt32) throws -> PeerRecord? {
        let stmt = try conn.statement("SELECT acked_through, mismatched, registries FROM sync_peers WHERE peer_node = ?1")
        stmt.bind(1, Int64(node))
        defer { stmt.reset() }
        guard try stmt.step() else { return nil }
        return PeerRecord(node: node, cursor: stmt.int64(0), mismatched: SyncStore.names(stmt.string(1)), registries: stmt.blob(2))
    }

    static func peerRecords(_ conn: SQLiteConnection) throws -> [PeerRecord] {
        let stmt = try conn.statement("SELECT peer_node, acked_through, mismatched, registries FROM sync_peers ORDER BY peer_node")
        defer { stmt.reset() }
        var records: [PeerRecord] = []
        while try stmt.step() {
            records.append(PeerRecord(node: UInt32(truncatingIfNeeded: stmt.int64(0)), cursor: stmt.int64(1),
                                      mismatched: SyncStore.names(stmt.string(2)), registries: stmt.blob(3)))
        }
        return records
    }

    /// Whether `node` is among the peers this store forgot (and not back since).
    static func wasForgotten(_ conn: SQLiteConnection, node: UInt32) throws -> Bool {
        let stmt = try conn.statement("SELECT 1 FROM sync_forgotten_peers WHERE peer_node = ?1")
        defer { stmt.reset() }
        stmt.bind(1, Int64(node))
        return try stmt.step()
    }

    /// The peers whose cursors say what still waits (pending changes, `peerHas`,
    /// tombstones held back). On a watch, a phone node superseded by one seen
    /// later under the same pairing (the phone took a new node id) is not
    /// among them: its row stays (a watch never forgets its phone), but its
    /// cursor never moves again, and it would keep every later change pending.
    static func waitingPeerRecords(_ conn: SQLiteConnection, role: DeviceRole) throws -> [PeerRecord] {
        let records = try peerRecords(conn)
        guard role == .watch, records.count > 1 else { return records }
        let stmt = try conn.statement("""
            SELECT p.peer_node FROM sync_peers p WHERE EXISTS (
              SELECT 1 FROM sync_peers q WHERE q.epoch = p.epoch AND q.peer_role = p.peer_role AND q.last_seen > p.last_seen)
            """)
        defer { stmt.reset() }
        var superseded: Set<UInt32> = []
        while try stmt.step() { superseded.insert(UInt32(truncatingIfNeeded: stmt.int64(0))) }
        return records.filter { !superseded.contains($0.node) }
    }

    private static func names(_ text: String) -> Set<String> {
        Set(text.split(separator: "\n").map(String.init))
    }

    /// The peers this store knows, with their cursors.
    func peerRecords() throws -> [PeerRecord] {
        try database.read { conn in try SyncStore.peerRecords(conn) }
    }

    /// `waitingPeerRecords(_:role:)` of this store.
    func waitingPeerRecords() throws -> [PeerRecord] {
        try database.read { conn in try SyncStore.waitingPeerRecords(conn, role: role) }
    }

    /// Whether `row`'s change still waits for some known peer (for any peer
    /// at all when none is known yet): it is in the stream after that peer's
    /// cursor and did not come from it, or its key is declared differently there.
    func isPending(_ row: StoredRow, peers: [PeerRecord]) -> Bool {
        guard row.lane.isSent, row.changeSeq > 0 else { return row.lane == .manual }
        guard !peers.isEmpty else { return true }
        let name = registry.descriptor(forEntry: row.key)?.name
        return peers.contains { peer in
            row.originPeer != peer.node && (row.changeSeq > peer.cursor || (name.map(peer.mismatched.contains) ?? false))
        }
    }

    // MARK: status

    /// Counts of changes waiting for the peer: for the least caught-up known
    /// peer (every peer's own figures: `pendingSummary(for:)`), or for any
    /// peer at all while none is known.
    public func pendingSummary() throws -> PendingSummary {
        try checkOpen()
        let peers = try waitingPeerRecords()
        // No peer yet: every change is pending (local changes have origin 0, so exclude no real node).
        guard !peers.isEmpty else { return try pendingSummary(cursor: 0, excluding: UInt32.max) }
        return try peers.map { try pendingSummary(cursor: $0.cursor, excluding: $0.node) }.max { $0.total < $1.total }!
    }

    /// Counts of changes waiting for `peer` (a node id, as in `SyncEvent.connected`).
    public func pendingSummary(for peer: UInt32) throws -> PendingSummary {
        try checkOpen()
        let cursor = try database.read { conn in try SyncStore.peerRecord(conn, node: peer)?.cursor } ?? 0
        return try pendingSummary(cursor: cursor, excluding: peer)
    }

    private func pendingSummary(cursor: Int64, excluding peer: UInt32) throws -> PendingSummary {
        let now = physicalClock.nowMilliseconds()
        return try database.read { conn in
            let stmt = try conn.statement("""
                SELECT
                  coalesce(sum(e.lane = 1 AND e.change_seq > ?1 AND e.origin_peer != ?2), 0),
                  coalesce(sum(e.lane = 3 AND e.change_seq > ?1 AND e.origin_peer != ?2), 0),
                  coalesce(sum(e.lane = 2), 0),
                  min(CASE WHEN e.lane = 2 OR (e.change_seq > ?1 AND e.origin_peer != ?2) THEN e.written_at END)
                FROM entries e WHERE e.lane IN (1, 2, 3)
                """)
            stmt.bind(1, cursor)
            stmt.bind(2, Int64(peer))
            _ = try stmt.step()
            defer { stmt.reset() }
            // Saturating: a damaged file's time must not overflow.
            let oldest: Int64? = stmt.isNull(3) ? nil : max(0, SyncStore.milliseconds(from: stmt.int64(3), to: now))
            // Held changes (their value unreadable when they were to go) wait too, behind the cursor.
            var automatic = 0, released = 0
            let lane = try conn.statement("SELECT lane, change_seq, origin_peer FROM entries WHERE key = ?1")
            for change in try SyncStore.heldChanges(conn) where change.seq <= cursor {
                lane.reset()
                lane.bind(1, change.key)
                guard try lane.step(), lane.int64(1) == change.seq, UInt32(truncatingIfNeeded: lane.int64(2)) != peer else { continue }
                if lane.int(0) == SyncLane.automatic.rawValue { automatic += 1 } else if lane.int(0) == SyncLane.released.rawValue { released += 1 }
            }
            lane.reset()
            return PendingSummary(automatic: stmt.int(0) + automatic, manualReleased: stmt.int(1) + released, manualWaiting: stmt.int(2),
                                  oldestPendingAgeMilliseconds: oldest)
        }
    }

    /// Whether every known peer has `key` at `version` or newer, as far as
    /// this store knows (the peer wrote it, or acknowledged it).
    public func peerHas(key: String, atLeast version: HLCTimestamp) throws -> Bool {
        try checkOpen()
        return try database.read { conn in
            guard let row = try loadRow(conn, key: KeyName.canonical(key), valueFile: .skip), row.version >= version else { return false }
            // Held, its value unreadable when it was to go: no peer got it through this store's stream.
            let held = try SyncStore.isHeld(conn, key: row.key, seq: row.changeSeq)
            let peers = try SyncStore.waitingPeerRecords(conn, role: role)
            guard !peers.isEmpty else { return row.originPeer != 0 }
            return peers.allSatisfy { peer in
                row.originPeer == peer.node || (row.lane.isSent && row.changeSeq <= peer.cursor && !held)
            }
        }
    }

    /// Once after the v5 migration: entries that came from a peer joined the
    /// stream; those whose key does not replicate from this device leave it.
    func assignLanesAfterMigration() throws {
        guard try meta("lanes_need_registry") != nil else { return }
        try database.write { conn in
            let select = try conn.statement("SELECT key FROM entries WHERE lane IN (1, 3) AND origin_peer != 0")
            var local: [String] = []
            while try select.step() {
                let key = select.string(0)
                if registry.descriptor(forEntry: key)?.replicates(from: role) != true { local.append(key) }
            }
            select.reset()
            let update = try conn.statement("UPDATE entries SET lane = 0 WHERE key = ?1")
            for key in local {
                update.reset()
                update.bind(1, key)
                try update.run()
            }
            try SyncStore.deleteMeta(conn, "lanes_need_registry")
        }
    }
}

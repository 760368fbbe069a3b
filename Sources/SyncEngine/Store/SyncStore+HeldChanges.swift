import Foundation
import SyncTransport

/// Changes whose value cannot be read for now are held, not passed over and
/// lost: a value file that is there but cannot be read
/// (`value-file-unreadable`), or a value sealed at rest while the store was
/// opened without its master key (`encryption-key-missing`).
///
/// Sending reads past such a change, so that every other change still goes
/// (a peer's cursor moves on), and notes it in `sync_meta` (the name is
/// `heldMetaPrefix` and the key; the value the change's sequence and why) in
/// a transaction of its own, before the rows read with it are sent. It is
/// reported once, when it is first noted. Each tick of a session (and each
/// mailbox round) tries the noted values again; one that reads now joins the
/// stream again with a new sequence, after every peer's cursor, and goes to
/// every peer (a value sealed without the key waits for a store opened with
/// it). A key written again since is dropped from the notes: its new change
/// is in the stream already.
extension SyncStore {
    /// The `sync_meta` names of held changes: this prefix and the entry's key.
    static let heldMetaPrefix = "held_change:"

    /// Why a change is held, as its note says.
    enum HeldReason: String, Sendable {
        /// Its value file is there but cannot be read.
        case file
        /// It is sealed and the store has no master key.
        case key
    }

    /// The reason to hold a change whose read failed with `error`; nil for
    /// an error that holding does not help (a damaged value is passed over).
    static func heldReason(_ error: SyncError) -> HeldReason? {
        switch error.code {
        case .valueFileUnreadable: .file
        case .encryptionKeyMissing: .key
        default: nil
        }
    }

    /// A change read for sending whose value cannot be read now.
    struct HeldChange: Sendable {
        var key: String
        var seq: Int64
        var error: SyncError
        var reason: HeldReason
    }

    /// Notes `held` (read for `peer`; nil: not one peer's read) and reports each
    /// change not noted before. Throws when the notes cannot be written: the
    /// caller must not pass over the changes then.
    func hold(_ held: [HeldChange], for peer: UInt32?) throws {
        guard !held.isEmpty else { return }
        let fresh = try database.write { conn -> [HeldChange] in
            let insert = try conn.statement("""
                INSERT INTO sync_meta(name, value) VALUES(?1, ?2)
                ON CONFLICT(name) DO UPDATE SET value = excluded.value WHERE sync_meta.value != excluded.value
                """)
            var fresh: [HeldChange] = []
            for change in held {
                insert.reset()
                insert.bind(1, SyncStore.heldMetaPrefix + change.key)
                insert.bind(2, "\(change.seq) \(change.reason.rawValue)")
                try insert.run()
                if conn.changes > 0 { fresh.append(change) }
            }
            return fresh
        }
        heldRetry.withLock { $0 = (due: true, notes: $0.notes &+ 1) }
        for change in fresh {
            logger.error("a stored value that cannot be read now is not sent yet; it is sent once it reads again",
                         metadata: ["key": "\(PeerText.escaped(change.key))", "error": "\(change.error)"])
            emit(.error(SyncError(change.error.code,
                                  "key '\(PeerText.escaped(change.key))' is not sent while its value cannot be read: \(change.error.message); it is sent once it reads again, and the other keys sync meanwhile")),
                 peer: peer)
        }
    }

    /// The held changes: key, sequence and reason of each note.
    func heldChanges() throws -> [(key: String, seq: Int64, reason: HeldReason)] {
        try database.read { conn in try SyncStore.heldChanges(conn) }
    }

    static func heldChanges(_ conn: SQLiteConnection) throws -> [(key: String, seq: Int64, reason: HeldReason)] {
        let stmt = try conn.statement("SELECT name, value FROM sync_meta WHERE name > ?1 AND name < ?2")
        stmt.bind(1, heldMetaPrefix)
        stmt.bind(2, String(heldMetaPrefix.dropLast()) + ";")
        defer { stmt.reset() }
        var held: [(key: String, seq: Int64, reason: HeldReason)] = []
        while try stmt.step() {
            let parts = stmt.string(1).split(separator: " ")
            // A note this build cannot read is tried again as a file's would be.
            let seq = parts.first.flatMap { Int64($0) } ?? 0
            let reason = parts.count > 1 ? HeldReason(rawValue: String(parts[1])) ?? .file : .file
            held.append((String(stmt.string(0).dropFirst(heldMetaPrefix.count)), seq, reason))
        }
        return held
    }

    /// Whether the change of `key` at `seq` is held (noted, not sent yet).
    static func isHeld(_ conn: SQLiteConnection, key: String, seq: Int64) throws -> Bool {
        let stmt = try conn.statement("SELECT value FROM sync_meta WHERE name = ?1")
        stmt.bind(1, heldMetaPrefix + key)
        defer { stmt.reset() }
        guard try stmt.step() else { return false }
        return stmt.string(0).split(separator: " ").first.flatMap { Int64($0) } == seq
    }

    /// Tries the held changes again (at open, a session's tick, a mailbox
    /// round): each whose value reads now, or whose key changed since, leaves
    /// the notes; the first joins the stream again after every cursor, and
    /// the sessions are woken. One that does not read, whatever the error,
    /// stays held (writing its key again replaces it). Does nothing when no
    /// note was found last time.
    func retryHeldChanges() {
        let (due, notes) = heldRetry.withLock { $0 }
        guard due, !closed.load(ordering: .relaxed) else { return }
        do {
            let held = try heldChanges()
            // A store's master key stays as it was opened: sealed values wait for an open with it.
            guard held.contains(where: { $0.reason == .file || cipher != nil }) else {
                heldRetry.withLock { if $0.notes == notes { $0.due = false } }
                return
            }
            // Read first, on a reader connection and outside the write: a value file may be large.
            var done: [(key: String, seq: Int64, release: Bool)] = []
            try database.readCommitted { conn in
                for change in held where change.reason == .file || cipher != nil {
                    do {
                        guard let row = try loadRow(conn, key: change.key, valueFile: .skip), row.changeSeq == change.seq, !row.deleted else {
                            done.append((change.key, change.seq, false))  // written again since: its new change is in the stream
                            continue
                        }
                        _ = try loadRow(conn, key: change.key)
                        done.append((change.key, change.seq, true))
                    } catch {
                        // Still cannot be read; or missing or damaged now, which may be a file being put
                        // back (moved aside, then in): released, sending would pass it over for good.
                        continue
                    }
                }
            }
            guard !done.isEmpty else { return }
            try database.write { conn in
                let still = try conn.statement("SELECT 1 FROM entries WHERE key = ?1 AND change_seq = ?2")
                let release = try conn.statement("UPDATE entries SET change_seq = ?3 WHERE key = ?1 AND change_seq = ?2")
                let drop = try conn.statement("DELETE FROM sync_meta WHERE name = ?1 AND value LIKE ?2")
                for change in done {
                    still.reset()
                    still.bind(1, change.key)
                    still.bind(2, change.seq)
                    // Not released twice (another session's tick may have run this too): no sequence is taken for nothing.
                    if change.release, try still.step() {
                        still.reset()
                        release.reset()
                        release.bind(1, change.key)
                        release.bind(2, change.seq)
                        release.bind(3, takeSeq())
                        try release.run()
                    }
                    still.reset()
                    drop.reset()
                    drop.bind(1, SyncStore.heldMetaPrefix + change.key)
                    drop.bind(2, "\(change.seq) %")
                    try drop.run()
                }
            }
            logger.notice("values that could not be read for sending read again and are sent",
                          metadata: ["count": "\(done.filter(\.release).count)"])
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(SyncStore.thisDevice)
        } catch {
            logger.debug("trying again the values that could not be read for sending waits", metadata: ["error": "\(error)"])
        }
    }
}

import Logging
import SyncTransport

extension SyncStore {
    /// Once after the v11 migration: a build before key names were kept in
    /// Unicode NFC stored a name as the app spelled it, so "José" written
    /// precomposed and decomposed could be two rows that Swift calls one key
    /// (reads found one of them, the other looked lost after a restart). Each
    /// such row moves to its NFC name; two rows of one name become what the
    /// merge rule keeps when one of them arrives from a peer (last writer
    /// wins, or the key's resolver), as a new change that reaches every peer.
    func normalizeKeyNamesAfterMigration() throws {
        guard try meta("keys_need_nfc") != nil else { return }
        try database.write { conn in
            // Only names with a character outside printable ASCII can be spelled two ways.
            let select = try conn.statement("SELECT key FROM entries WHERE key GLOB '*[^ -~]*'")
            var spellings: [String: [String]] = [:]
            while try select.step() {
                let stored = select.string(0)
                let name = KeyName.canonical(stored)
                // Swift compares by canonical equivalence: the bytes tell the spellings apart.
                if !stored.utf8.elementsEqual(name.utf8) { spellings[name, default: []].append(stored) }
            }
            select.reset()
            let now = physicalClock.nowMilliseconds()
            var failed = false
            for (name, others) in spellings {
                do {
                    let released = try conn.savepoint { try moveSpellings(others, to: name, conn, writtenAt: now) }
                    for (key, version) in released { valueStorage.release(key: key, version: version) }
                } catch {
                    // The rows stay as they were (readable by the name they were written with); the next open tries again.
                    logger.error("a key name could not be moved to its NFC spelling", metadata: ["key": "\(PeerText.escaped(name))", "error": "\(error)"])
                    failed = true
                }
            }
            if !failed { try SyncStore.deleteMeta(conn, "keys_need_nfc") }
        }
    }

    /// Moves the rows of `others` to `name` (combined with its own row); returns
    /// the value files the move made obsolete, for after the commit.
    private func moveSpellings(_ others: [String], to name: String, _ conn: SQLiteConnection,
                               writtenAt: Int64) throws -> [(key: String, version: HLCTimestamp)] {
        var released: [(key: String, version: HLCTimestamp)] = []
        let existing = try loadRow(conn, key: name)
        var kept = existing
        var combined = false
        let registered = registry.registered(forEntry: name)
        for spelling in others {
            guard var row = try loadRow(conn, key: spelling) else { continue }
            released.append((spelling, row.version))
            row.key = name
            guard let current = kept else {
                kept = row
                continue
            }
            combined = true
            switch MergeRule.decide(local: current.state, incoming: row.state, resolver: registered?.resolver?.merge,
                                    maxValueSize: options.maxValueSize).outcome {
            case .ignore:
                break
            case .take:
                kept = row
            case .merged(let value, let version, let base):
                let lane = registered.map { SyncStore.mergedLane(for: $0.descriptor, on: role, size: value.count, replacing: current.lane) }
                kept = StoredRow(key: name, value: value, encoding: current.encoding, version: version, base: base, deleted: false,
                                 encrypted: current.encrypted, size: value.count, changeSeq: 0, lane: lane ?? current.lane, originPeer: 0)
            }
        }
        for spelling in others {
            for table in ["entries", "sync_chunks", "sync_rebaseline_marks"] {
                let delete = try conn.statement("DELETE FROM \(table) WHERE key = ?1")
                delete.bind(1, spelling)
                try delete.run()
            }
        }
        guard var row = kept else { return released }
        if combined {
            // New to a peer that holds either spelling: it goes to every peer but the one it came from.
            row.changeSeq = takeSeq()
            if row.lane == .none, let descriptor = registered?.descriptor {
                row.lane = lane(for: descriptor, size: row.size, deleted: row.deleted)
            }
        }
        if let existing, existing.version != row.version { released.append((name, existing.version)) }
        try saveRow(conn, row, encrypt: row.encrypted && !row.deleted, writtenAt: writtenAt)
        return released
    }
}

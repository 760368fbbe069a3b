/// Versioned schema, migrated forward on open (`PRAGMA user_version`).
///
/// `entries` holds the data; every metadata table starts with `sync_`.
///
/// Since v3 the changes waiting for the peer are rows of `sync_outbox`
/// (sequence, key), kept by triggers in the transaction that writes the entry:
/// acknowledging a change deletes its narrow outbox row instead of rewriting
/// the entry's row. Since v4 the conflict log holds one row per resolution.
/// Since v5 each peer reads one stream of changes from its own cursor
/// (`sync_peers.acked_through`): no outbox, and a phone serves several watches.
/// Since v6 tombstones every peer has are purged (`sync_meta` 'purged_through'
/// holds the newest purged version) and watches unseen for long are forgotten
/// (`sync_forgotten_peers`). Since v7 a peer's row keeps the two key
/// registries compared last (`sync_peers.registries`), so that queued
/// messages of that registry pass over only the keys declared differently.
/// Since v8 a re-baselined watch marks what the notice would remove
/// (`sync_rebaseline_marks`) and removes what is still marked once the
/// baseline came: values the baseline brings back never go. Since v9 a
/// staged chunk names the value it belongs to (`total_size`, `total_crc`):
/// a resolver's merge gives one version two values, whose chunks never join.
/// Since v10 `entries` and `sync_chunks` are rowid tables (a lookup in a
/// WITHOUT ROWID table reads the large values it passes), the value last.
/// Since v11 key names are in Unicode NFC (rows of other spellings moved once).
/// Since v12 `sync_commit_log` numbers its rows without `AUTOINCREMENT`: a
/// commit writes no `sqlite_sequence` page (the newest row is never pruned,
/// so ids still only grow); its rows name their format, 2 being compact.
///
/// Every store carries `PRAGMA application_id = 0x5379456E` (ASCII "SyEn"),
/// set with the schema; `Database` refuses SQLite files with another id.
enum Schema {
    static let currentVersion = 12
    /// `PRAGMA application_id` of a SyncEngine store: ASCII "SyEn".
    static let applicationID: Int32 = 0x5379_456E
    /// Looks a key up in `entries`, reading only what finding its row reads.
    static let keyLookupSQL = "SELECT 1 FROM entries WHERE key = ?"

    static let migrations: [String] = [
        // v1
        """
        CREATE TABLE entries (
            key        TEXT PRIMARY KEY NOT NULL,
            value      BLOB,
            encoding   TEXT NOT NULL,
            ver        INTEGER NOT NULL,
            node       INTEGER NOT NULL,
            base_ver   INTEGER NOT NULL,
            base_node  INTEGER NOT NULL,
            deleted    INTEGER NOT NULL DEFAULT 0,
            encrypted  INTEGER NOT NULL DEFAULT 0,
            size       INTEGER NOT NULL,
            change_seq INTEGER NOT NULL DEFAULT 0,
            lane       INTEGER NOT NULL DEFAULT 0,
            acked_seq  INTEGER NOT NULL DEFAULT 0,
            written_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX sync_pending_changes ON entries(change_seq) WHERE change_seq > acked_seq AND lane > 0;
        CREATE TABLE sync_meta (
            name  TEXT PRIMARY KEY NOT NULL,
            value TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE sync_peers (
            peer_node    INTEGER PRIMARY KEY NOT NULL,
            peer_role    TEXT NOT NULL,
            epoch        TEXT NOT NULL,
            acked_through INTEGER NOT NULL DEFAULT 0,
            last_seen    INTEGER NOT NULL
        );
        CREATE TABLE sync_conflicts (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            key         TEXT NOT NULL,
            local_ver   INTEGER NOT NULL,
            local_node  INTEGER NOT NULL,
            remote_ver  INTEGER NOT NULL,
            remote_node INTEGER NOT NULL,
            winner      TEXT NOT NULL,
            rule        TEXT NOT NULL,
            resolved_at INTEGER NOT NULL
        );
        CREATE TABLE sync_chunks (
            key        TEXT NOT NULL,
            ver        INTEGER NOT NULL,
            node       INTEGER NOT NULL,
            idx        INTEGER NOT NULL,
            data       BLOB NOT NULL,
            PRIMARY KEY (key, ver, node, idx)
        ) WITHOUT ROWID;
        """,
        // v2: values kept in files (`FileValueStore`), and the log other processes
        // sharing the file read to learn which keys changed.
        """
        ALTER TABLE entries ADD COLUMN in_file INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE sync_commit_log (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            changes BLOB NOT NULL
        );
        """,
        // v3: the outbox. A row (seq, key) exists while the entry `key` holds the
        // local change `seq` in a lane that replicates (lane > 0) and the peer has
        // not acknowledged it. Triggers keep it in the entry's own transaction;
        // `acknowledge` deletes rows. Replaces `acked_seq` and its partial index.
        """
        CREATE TABLE sync_outbox (
            seq INTEGER PRIMARY KEY NOT NULL,
            key TEXT NOT NULL
        );
        CREATE TRIGGER sync_outbox_after_insert AFTER INSERT ON entries
        WHEN NEW.lane > 0 AND NEW.change_seq > 0 BEGIN
            INSERT INTO sync_outbox(seq, key) VALUES (NEW.change_seq, NEW.key);
        END;
        CREATE TRIGGER sync_outbox_after_update AFTER UPDATE OF change_seq, lane ON entries
        WHEN NEW.change_seq IS NOT OLD.change_seq OR NEW.lane IS NOT OLD.lane BEGIN
            DELETE FROM sync_outbox WHERE seq = OLD.change_seq AND key = OLD.key;
            INSERT INTO sync_outbox(seq, key) SELECT NEW.change_seq, NEW.key WHERE NEW.lane > 0 AND NEW.change_seq > 0;
        END;
        CREATE TRIGGER sync_outbox_after_delete AFTER DELETE ON entries BEGIN
            DELETE FROM sync_outbox WHERE seq = OLD.change_seq AND key = OLD.key;
        END;
        INSERT OR IGNORE INTO sync_outbox(seq, key)
            SELECT change_seq, key FROM entries WHERE change_seq > acked_seq AND lane > 0 ORDER BY change_seq, key;
        WITH unqueued AS (
            SELECT key, row_number() OVER (ORDER BY change_seq, key) AS n FROM entries
            WHERE change_seq > acked_seq AND lane > 0
              AND NOT EXISTS (SELECT 1 FROM sync_outbox WHERE seq = entries.change_seq AND sync_outbox.key = entries.key)
        )
        UPDATE entries SET change_seq = (SELECT max(max(change_seq), max(acked_seq)) FROM entries) + unqueued.n
            FROM unqueued WHERE entries.key = unqueued.key;
        DROP INDEX sync_pending_changes;
        ALTER TABLE entries DROP COLUMN acked_seq;
        """,
        // v4: one conflict log row per resolution (a duplicated delivery used to log
        // the same conflict again); duplicates already logged keep their first row.
        """
        DELETE FROM sync_conflicts WHERE id NOT IN (
            SELECT min(id) FROM sync_conflicts GROUP BY key, local_ver, local_node, remote_ver, remote_node);
        CREATE UNIQUE INDEX sync_conflicts_resolution ON sync_conflicts(key, local_ver, local_node, remote_ver, remote_node);
        """,
        // v5: per-peer cursors replace the outbox. A change is in the stream every peer
        // reads (lane 1 automatic, lane 3 a manual change released by sync()) from its
        // own cursor (`sync_peers.acked_through`); lane 2 waits for sync(). An entry
        // applied from a peer joins the stream for the other peers, never for the one
        // it came from (`origin_peer`). The outbox's queue survives: its changes move
        // after the current peer's cursor; other (old) peers start again from 0.
        """
        ALTER TABLE entries ADD COLUMN origin_peer INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sync_peers ADD COLUMN mismatched TEXT NOT NULL DEFAULT '';
        UPDATE entries SET lane = 3 WHERE lane = 2 AND (
            change_seq <= coalesce((SELECT CAST(value AS INTEGER) FROM sync_meta WHERE name = 'manual_flush_through'), 0)
            OR NOT EXISTS (SELECT 1 FROM sync_outbox o WHERE o.seq = entries.change_seq AND o.key = entries.key));
        UPDATE entries SET lane = 1, origin_peer = coalesce((SELECT CAST(substr(value, 1, instr(value, '/') - 1) AS INTEGER)
            FROM sync_meta WHERE name = 'current_peer'), 0) WHERE change_seq = 0;
        UPDATE sync_peers SET acked_through = CASE
            WHEN peer_node = (SELECT CAST(substr(value, 1, instr(value, '/') - 1) AS INTEGER) FROM sync_meta WHERE name = 'current_peer')
            THEN max((SELECT coalesce(max(change_seq), 0) FROM entries), (SELECT coalesce(max(acked_through), 0) FROM sync_peers))
            ELSE 0 END;
        WITH queued AS (
            SELECT key, row_number() OVER (ORDER BY change_seq, key) AS n FROM entries
            WHERE change_seq = 0 OR EXISTS (SELECT 1 FROM sync_outbox o WHERE o.seq = entries.change_seq AND o.key = entries.key)
        )
        UPDATE entries SET change_seq = (SELECT max(coalesce(max(change_seq), 0), (SELECT coalesce(max(acked_through), 0) FROM sync_peers))
            FROM entries) + queued.n FROM queued WHERE entries.key = queued.key;
        DROP TRIGGER sync_outbox_after_insert;
        DROP TRIGGER sync_outbox_after_update;
        DROP TRIGGER sync_outbox_after_delete;
        DROP TABLE sync_outbox;
        DELETE FROM sync_meta WHERE name IN ('manual_flush_through', 'current_peer');
        INSERT OR REPLACE INTO sync_meta(name, value) VALUES ('lanes_need_registry', '1');
        CREATE INDEX sync_stream ON entries(change_seq) WHERE lane IN (1, 3);
        """,
        // v6: tombstones are purged once every known peer has them and the retention
        // passed; `sync_peers.last_seen` (there since v1) now also moves with each
        // acknowledgement, and a watch unseen past the horizon leaves `sync_peers`
        // for `sync_forgotten_peers` (it no longer holds tombstones back).
        """
        CREATE TABLE sync_forgotten_peers (
            peer_node    INTEGER PRIMARY KEY NOT NULL,
            peer_role    TEXT NOT NULL,
            forgotten_at INTEGER NOT NULL,
            last_seen    INTEGER NOT NULL
        );
        CREATE INDEX sync_tombstones ON entries(ver) WHERE deleted = 1;
        """,
        // v7: the fingerprints of this device's key registry and the peer's (32 bytes
        // each) when they were last compared and `mismatched` found; NULL before.
        """
        ALTER TABLE sync_peers ADD COLUMN registries BLOB;
        """,
        // v8: the entries (key and version) a re-baseline notice found the phone knew,
        // removed once the baseline came (caught-up notice, or the mailbox read's end) unless it sent them again.
        """
        CREATE TABLE sync_rebaseline_marks (
            key  TEXT PRIMARY KEY NOT NULL,
            ver  INTEGER NOT NULL,
            node INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
        // v9: the value a staged chunk belongs to (its transfer's total size and CRC-32; -1 for
        // chunks staged before, which the next chunk of their version replaces).
        """
        ALTER TABLE sync_chunks ADD COLUMN total_size INTEGER NOT NULL DEFAULT -1;
        ALTER TABLE sync_chunks ADD COLUMN total_crc INTEGER NOT NULL DEFAULT -1;
        """,
        // v10: `entries` and `sync_chunks` become rowid tables (their keys in a unique
        // index), the value (a chunk's data) the last column. In a WITHOUT ROWID table the
        // rows are the b-tree's keys: a lookup compares its key with whole rows, and reads
        // every overflow page of each large value it meets on the way (a lookup beside a
        // 1 MB value read 1 MB). Both tables are copied, with their indexes.
        """
        CREATE TABLE sync_entries_v10 (
            key         TEXT PRIMARY KEY NOT NULL,
            encoding    TEXT NOT NULL,
            ver         INTEGER NOT NULL,
            node        INTEGER NOT NULL,
            base_ver    INTEGER NOT NULL,
            base_node   INTEGER NOT NULL,
            deleted     INTEGER NOT NULL DEFAULT 0,
            encrypted   INTEGER NOT NULL DEFAULT 0,
            size        INTEGER NOT NULL,
            change_seq  INTEGER NOT NULL DEFAULT 0,
            lane        INTEGER NOT NULL DEFAULT 0,
            written_at  INTEGER NOT NULL,
            in_file     INTEGER NOT NULL DEFAULT 0,
            origin_peer INTEGER NOT NULL DEFAULT 0,
            value       BLOB
        );
        INSERT INTO sync_entries_v10(key, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane,
                                     written_at, in_file, origin_peer, value)
            SELECT key, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane,
                   written_at, in_file, origin_peer, value FROM entries;
        DROP TABLE entries;
        ALTER TABLE sync_entries_v10 RENAME TO entries;
        CREATE INDEX sync_stream ON entries(change_seq) WHERE lane IN (1, 3);
        CREATE INDEX sync_tombstones ON entries(ver) WHERE deleted = 1;
        CREATE TABLE sync_chunks_v10 (
            key        TEXT NOT NULL,
            ver        INTEGER NOT NULL,
            node       INTEGER NOT NULL,
            idx        INTEGER NOT NULL,
            total_size INTEGER NOT NULL DEFAULT -1,
            total_crc  INTEGER NOT NULL DEFAULT -1,
            data       BLOB NOT NULL,
            PRIMARY KEY (key, ver, node, idx)
        );
        INSERT INTO sync_chunks_v10(key, ver, node, idx, total_size, total_crc, data)
            SELECT key, ver, node, idx, total_size, total_crc, data FROM sync_chunks;
        DROP TABLE sync_chunks;
        ALTER TABLE sync_chunks_v10 RENAME TO sync_chunks;
        """,
        // v11: key names are kept in Unicode NFC; the rows of a name spelled otherwise move
        // at the next open (`SyncStore.normalizeKeyNamesAfterMigration`).
        """
        INSERT OR REPLACE INTO sync_meta(name, value) VALUES ('keys_need_nfc', '1');
        """,
        // v12: the commit log without AUTOINCREMENT, which made every commit write its counter
        // in `sqlite_sequence` (a fourth page for a single write). Ids keep growing without it:
        // a new row takes the largest id plus one, and pruning never removes the largest.
        // Rows name their format (`CommitLogRecord`): 2 is compact, and a row an older build
        // still writes (it names none) is read as 1.
        """
        CREATE TABLE sync_commit_log_v12 (
            id      INTEGER PRIMARY KEY,
            changes BLOB NOT NULL,
            format  INTEGER NOT NULL DEFAULT 1
        );
        INSERT INTO sync_commit_log_v12(id, changes) SELECT id, changes FROM sync_commit_log;
        DROP TABLE sync_commit_log;
        ALTER TABLE sync_commit_log_v12 RENAME TO sync_commit_log;
        DELETE FROM sqlite_sequence WHERE name = 'sync_commit_log';
        """,
    ]

    /// Throws `.schemaTooNew` for a store a newer build made; reads only, so
    /// `Database` calls it before it writes anything (that build's file stays as it was).
    static func refuseNewer(_ conn: SQLiteConnection) throws {
        let version = Int(try conn.integer("PRAGMA user_version"))
        if version > currentVersion {
            throw SyncError(.schemaTooNew, "the store at \(conn.path) has schema version \(version), newer than this SyncEngine understands (\(currentVersion)); it was left untouched — update the app")
        }
    }

    /// Every table of the current schema with its columns, as the migrations make them.
    static let expectedColumns: [String: Set<String>] = {
        guard let conn = try? SQLiteConnection(path: ":memory:") else { return [:] }
        defer { conn.close() }
        guard (try? migrations.forEach { try conn.execute($0) }) != nil else { return [:] }
        return (try? columns(conn)) ?? [:]
    }()

    private static func columns(_ conn: SQLiteConnection) throws -> [String: Set<String>] {
        let stmt = try conn.statement(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
        defer { stmt.reset() }
        var tables: [String: Set<String>] = [:]
        while try stmt.step() { tables[stmt.string(0), default: []].insert(stmt.string(1)) }
        return tables
    }

    /// Throws `.databaseCorrupt`, naming what is missing, for a migrated store
    /// that lacks a table or a column of the current schema (every statement
    /// on it would fail with SQLite's "no such column"). Reads only.
    static func checkShape(_ conn: SQLiteConnection) throws {
        let found = try columns(conn)
        for (table, columns) in expectedColumns.sorted(by: { $0.key < $1.key }) {
            guard let present = found[table] else {
                throw damagedShape(conn.path, "its table \(table) is missing")
            }
            if let column = columns.subtracting(present).sorted().first {
                throw damagedShape(conn.path, "its table \(table) has no column \(column)")
            }
        }
    }

    private static func damagedShape(_ path: String, _ what: String) -> SyncError {
        SyncError(.databaseCorrupt, "the store at \(path) is damaged: \(what); it was left untouched — restore a backup or move the file aside and open a new store")
    }

    /// Brings the schema to `currentVersion` and marks the file with
    /// `applicationID` (a store made before the id gets it here), in one transaction.
    static func migrate(_ conn: SQLiteConnection) throws {
        try refuseNewer(conn)
        let version = Int(try conn.integer("PRAGMA user_version"))
        // The header's schema number damaged: below any version, or 0 in a file that holds a store's tables.
        let holdsTables = version == 0 ? try conn.integer("SELECT count(*) FROM sqlite_master WHERE name = 'entries'") > 0 : false
        if version < 0 || holdsTables {
            throw SyncError(.databaseCorrupt, "the store at \(conn.path) is damaged: its header names schema version \(version), which no store has; restore a backup or move the file aside and open a new store")
        }
        let marked = try conn.integer("PRAGMA application_id") == Int64(applicationID)
        guard version < currentVersion || !marked else { return }
        try conn.transaction {
            for v in version..<currentVersion {
                try conn.execute(migrations[v])
            }
            try conn.execute("PRAGMA user_version = \(currentVersion)")
            try conn.execute("PRAGMA application_id = \(applicationID)")
        }
    }
}

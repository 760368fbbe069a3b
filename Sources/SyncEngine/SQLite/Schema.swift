/// Versioned schema, migrated forward on open (`PRAGMA user_version`).
///
/// `entries` holds the data; every metadata table starts with `sync_`.
enum Schema {
    static let currentVersion = 2

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
    ]

    static func migrate(_ conn: SQLiteConnection) throws {
        let stmt = try conn.statement("PRAGMA user_version")
        _ = try stmt.step()
        let version = stmt.int(0)
        try stmt.run()
        if version > currentVersion {
            throw SyncError(.schemaTooNew, "the store at \(conn.path) has schema version \(version), newer than this SyncEngine understands (\(currentVersion)); update the app")
        }
        guard version < currentVersion else { return }
        try conn.transaction {
            for v in version..<currentVersion {
                try conn.execute(migrations[v])
            }
            try conn.execute("PRAGMA user_version = \(currentVersion)")
        }
    }
}

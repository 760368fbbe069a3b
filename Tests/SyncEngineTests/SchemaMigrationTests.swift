import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Stores written by an earlier schema open with their data and their queue intact.
@Suite struct SchemaMigrationTests {
    /// A schema-v2 file (changes queued with `acked_seq` and a partial index)
    /// migrates through v3's `sync_outbox` to v5's per-peer cursors: what
    /// waited still waits, what the peer acknowledged is not sent again, two
    /// queued rows that share a sequence (never written by this engine, but
    /// possible in a damaged file) both stay queued, and a peer that is not
    /// the current one starts again from the beginning.
    @Test func v2QueueSurvivesToPerPeerCursors() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))

        // Real rows, written by the current engine into a scratch store.
        let scratch = try SyncStore(path: folder.file("scratch.sqlite"), role: .phone, registry: registry, options: options)
        try await scratch.set(5, for: TestKeys.steps)               // automatic, queued
        try await scratch.set("imperial", for: TestKeys.units)      // automatic, acknowledged below
        try await scratch.set("Ada", for: TestKeys.name)            // manual, waiting for sync()
        try await scratch.set("local", for: TestKeys.draft)         // never
        try await scratch.set(Data([1, 2, 3]), for: TestKeys.blob)  // automatic, given steps' sequence below
        scratch.close()

        // The same rows in a v2 file.
        let path = folder.file("phone.sqlite")
        try sqlite(path) { db in
            for migration in Schema.migrations[0..<2] { try exec(db, migration) }
            try exec(db, "PRAGMA user_version = 2")
            try exec(db, "ATTACH '\(folder.file("scratch.sqlite"))' AS scratch")
            try exec(db, "INSERT INTO sync_meta SELECT * FROM scratch.sync_meta")
            let columns = "key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, written_at, in_file"
            try exec(db, "INSERT INTO entries(\(columns), acked_seq) SELECT \(columns), 0 FROM scratch.entries")
            try exec(db, "UPDATE entries SET acked_seq = change_seq WHERE key = 'units'")
            try exec(db, "UPDATE entries SET change_seq = (SELECT change_seq FROM entries WHERE key = 'health:daily:steps') WHERE key = 'blob'")
            // The watch it synced with (current), and an older one.
            try exec(db, "INSERT INTO sync_peers(peer_node, peer_role, epoch, acked_through, last_seen) VALUES (\(Self.watchNode), 'watch', 'test', 2, 0)")
            try exec(db, "INSERT INTO sync_meta(name, value) VALUES ('current_peer', '\(Self.watchNode)/test')")
        }
        let oldHighest = try sqliteInt(path, "SELECT max(change_seq) FROM entries")

        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try sqliteInt(path, "PRAGMA user_version") == Int64(Schema.currentVersion))
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE name = 'sync_outbox'") == 0)
        #expect(try sqliteInt(path, "SELECT count(*) FROM pragma_table_info('entries') WHERE name = 'acked_seq'") == 0)
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE name = 'sync_pending_changes'") == 0)

        let info = Dictionary(uniqueKeysWithValues: try phone.allEntryInfo().map { ($0.key, $0) })
        #expect(info["health:daily:steps"]?.isPending == true)
        #expect(info["blob"]?.isPending == true)
        #expect(info["profile:name"]?.isPending == true)
        #expect(info["units"]?.isPending == false)
        #expect(info["draft"]?.isPending == false)
        // One of the two rows that shared a sequence kept it; the other was queued again above everything in the file.
        let shared = [try #require(info["blob"]?.changeSequence), try #require(info["health:daily:steps"]?.changeSequence)]
        #expect(shared[0] != shared[1])
        let highest = try #require(shared.max())
        #expect(highest > oldHighest)
        // One read: the oldest pending age comes from the wall clock and moves between two.
        let summary = try phone.pendingSummary()
        #expect(summary == PendingSummary(automatic: 2, manualReleased: 0, manualWaiting: 1,
                                          oldestPendingAgeMilliseconds: summary.oldestPendingAgeMilliseconds))
        #expect(summary.oldestPendingAgeMilliseconds != nil)
        // The next change is numbered above everything the file holds.
        try await phone.set(6, for: TestKeys.steps)
        #expect(try #require(try phone.entryInfo(forKey: "health:daily:steps")).changeSequence > highest)

        // What was queued reaches a watch; what was acknowledged is not sent again.
        var watchOptions = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
        watchOptions.nodeID = Self.watchNode
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: watchOptions)
        let link = Link(phone, watch)
        link.connect()
        #expect(try watch.storedValue(for: TestKeys.steps) == 6)
        #expect(try watch.storedValue(for: TestKeys.blob) == Data([1, 2, 3]))
        #expect(try watch.storedValue(for: TestKeys.units) == nil)
        #expect(try watch.storedValue(for: TestKeys.name) == nil)
        _ = try phone.requestManualSync()
        link.settle()
        #expect(try watch.storedValue(for: TestKeys.name) == "Ada")
        #expect(try phone.pendingSummary().total == 0)
    }

    static let watchNode: UInt32 = 0x2002

    /// A v4 file (the outbox) moves to v5: the current peer's cursor passes
    /// what it acknowledged and stops before what waited for it, entries taken
    /// from it are never sent back to it, and an older peer starts again from 0.
    @Test func v4OutboxBecomesTheCurrentPeersCursor() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))
        let path = folder.file("phone.sqlite")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try await store.set(1, for: TestKeys.steps)    // acknowledged below
            try await store.set(2, for: TestKeys.daily["a"])  // still queued
            store.close()
        }
        // Back to v4: the outbox holds the queued change; the watch's value arrived without a sequence.
        try sqlite(path) { db in
            try exec(db, "DROP TABLE sync_rebaseline_marks")
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_size")
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_crc")
            try exec(db, "DROP TABLE sync_forgotten_peers")
            try exec(db, "DROP INDEX sync_tombstones")
            try exec(db, "DROP INDEX sync_stream")
            try exec(db, "ALTER TABLE entries DROP COLUMN origin_peer")
            try exec(db, "ALTER TABLE sync_peers DROP COLUMN registries")
            try exec(db, "ALTER TABLE sync_peers DROP COLUMN mismatched")
            try exec(db, "CREATE TABLE sync_outbox (seq INTEGER PRIMARY KEY NOT NULL, key TEXT NOT NULL)")
            try exec(db, "CREATE TRIGGER sync_outbox_after_insert AFTER INSERT ON entries BEGIN SELECT 1; END")
            try exec(db, "CREATE TRIGGER sync_outbox_after_update AFTER UPDATE ON entries BEGIN SELECT 1; END")
            try exec(db, "CREATE TRIGGER sync_outbox_after_delete AFTER DELETE ON entries BEGIN SELECT 1; END")
            try exec(db, "INSERT INTO sync_outbox SELECT change_seq, key FROM entries WHERE key = 'steps:day:a'")
            try exec(db, "INSERT INTO entries(key, value, encoding, ver, node, base_ver, base_node, size, change_seq, lane, written_at) VALUES ('tags', CAST('[\"w\"]' AS BLOB), 'json', 5, \(Self.watchNode), 0, 0, 5, 0, 0, 0)")
            try exec(db, "INSERT INTO sync_peers(peer_node, peer_role, epoch, acked_through, last_seen) VALUES (\(Self.watchNode), 'watch', 'test', 1, 0), (77, 'watch', 'old', 99, 0)")
            try exec(db, "INSERT INTO sync_meta(name, value) VALUES ('current_peer', '\(Self.watchNode)/test'), ('manual_flush_through', '0')")
            try exec(db, "PRAGMA user_version = 4")
        }
        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE name = 'sync_outbox'") == 0)
        #expect(try sqliteInt(path, "SELECT acked_through FROM sync_peers WHERE peer_node = 77") == 0)
        // One reading (its age moves between two calls).
        let pending = try phone.pendingSummary(for: Self.watchNode)
        #expect(pending == PendingSummary(automatic: 1, manualReleased: 0, manualWaiting: 0,
                                          oldestPendingAgeMilliseconds: pending.oldestPendingAgeMilliseconds))
        // The older watch gets everything again, the watch's own value included.
        #expect(try phone.pendingSummary(for: 77).automatic == 3)

        var watchOptions = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
        watchOptions.nodeID = Self.watchNode
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: watchOptions)
        let link = Link(phone, watch)
        link.connect()
        #expect(try watch.storedValue(for: TestKeys.daily["a"]) == 2)
        #expect(try watch.storedValue(for: TestKeys.steps) == nil)  // acknowledged before: not sent again
        #expect(try watch.storedValue(for: TestKeys.tags) == nil)   // it came from the watch: never sent back
        #expect(try phone.pendingSummary(for: Self.watchNode).total == 0)
    }

    /// A v5 file moves to v6 (tombstone purging, forgotten peers) with what
    /// waits and every peer's cursor intact, and its tombstones kept until
    /// the peers have them and the retention passes.
    @Test func v5CursorsAndPendingSurviveToV6() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let clock = ManualClock()
        let options = StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("phone.key")))
        let path = folder.file("phone.sqlite")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try store.recordPeer(node: Self.watchNode, role: .watch, epoch: "test")
            try await store.set(1, for: TestKeys.steps)
            try await store.remove(TestKeys.steps)               // a tombstone, acknowledged below
            try store.acknowledge(peer: Self.watchNode, through: try #require(try store.entryInfo(forKey: "health:daily:steps")).changeSequence)
            try await store.set(2, for: TestKeys.daily["a"])     // still waiting for the watch
            try await store.set("Ada", for: TestKeys.name)       // waiting for sync()
            store.close()
        }
        // Back to v5.
        try sqlite(path) { db in
            try exec(db, "DROP TABLE sync_rebaseline_marks")
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_size")
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_crc")
            try exec(db, "DROP TABLE sync_forgotten_peers")
            try exec(db, "DROP INDEX sync_tombstones")
            try exec(db, "ALTER TABLE sync_peers DROP COLUMN registries")
            try exec(db, "PRAGMA user_version = 5")
        }
        let cursorBefore = try sqliteInt(path, "SELECT acked_through FROM sync_peers WHERE peer_node = \(Self.watchNode)")
        #expect(cursorBefore > 0)

        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try sqliteInt(path, "PRAGMA user_version") == Int64(Schema.currentVersion))
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE name IN ('sync_forgotten_peers', 'sync_tombstones')") == 2)
        #expect(try sqliteInt(path, "SELECT acked_through FROM sync_peers WHERE peer_node = \(Self.watchNode)") == cursorBefore)
        // v7: no live session compared registries yet.
        #expect(try sqliteInt(path, "SELECT count(*) FROM sync_peers WHERE registries IS NULL") == 1)
        #expect(try phone.pendingSummary(for: Self.watchNode).automatic == 1)
        #expect(try phone.pendingSummary(for: Self.watchNode).manualWaiting == 1)
        #expect(try phone.entryInfo(forKey: "health:daily:steps")?.isDeleted == true)
        #expect(try phone.purgedThrough() == 0)

        // The tombstone goes once the retention passed; the watch still resumes from its cursor.
        clock.advance(by: 31 * 86_400_000)
        #expect(try phone.purgeTombstones() == 1)
        var watchOptions = StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("watch.key")))
        watchOptions.nodeID = Self.watchNode
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: watchOptions)
        let link = Link(phone, watch)
        link.connect()
        #expect(try watch.storedValue(for: TestKeys.daily["a"]) == 2)
        #expect(watch.syncCounters.entriesReceived == 1)
        #expect(!link.frames.contains { $0.frame.type == SyncMessage.MessageType.rebaseline.rawValue })
    }

    /// The peer's cursor follows every write: a newer local change takes a new
    /// place in the stream, an acknowledgement of an older change leaves the
    /// newer one waiting, and a value taken from the peer is never sent back.
    @Test func cursorFollowsWritesAndAcknowledgements() async throws {
        let pair = try Pair()
        try pair.phone.recordPeer(node: pair.watch.nodeID, role: .watch, epoch: "test")
        try await pair.phone.set(1, for: TestKeys.steps)
        let first = try #require(try pair.phone.entryInfo(forKey: "health:daily:steps")).changeSequence
        try await pair.phone.set(2, for: TestKeys.steps)
        let second = try #require(try pair.phone.entryInfo(forKey: "health:daily:steps")).changeSequence
        #expect(second > first)

        // A late acknowledgement of the first change: the second still waits.
        try pair.phone.acknowledge(peer: pair.watch.nodeID, through: first)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == true)
        try pair.phone.acknowledge(peer: pair.watch.nodeID, through: second)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == false)
        try pair.phone.acknowledge(peer: pair.watch.nodeID, through: first)  // never moves back
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == false)

        // A newer value from the watch replaces a queued local change: nothing is left to send.
        try await pair.phone.set(3, for: TestKeys.steps)
        pair.watchClock.advance(by: 60_000)
        try await pair.watch.set(4, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 4)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 4)
        #expect(try pair.phone.pendingSummary().total == 0)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == false)
    }
    /// v9: a v8 store's staged chunks name no value (-1); the next chunk of
    /// their version replaces them rather than join them.
    @Test func v8StagedChunksNameNoValueAndTheNextChunkReplacesThem() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
        let path = folder.file("watch.sqlite")
        try SyncStore(path: path, role: .watch, registry: registry, options: options).close()
        try sqlite(path) { db in
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_size")
            try exec(db, "ALTER TABLE sync_chunks DROP COLUMN total_crc")
            try exec(db, "INSERT INTO sync_chunks(key, ver, node, idx, data) VALUES ('\(TestKeys.blob.name)', 5, 77, 0, x'00010203')")
            try exec(db, "PRAGMA user_version = 8")
        }
        let store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        #expect(try sqliteInt(path, "PRAGMA user_version") == Int64(Schema.currentVersion))
        #expect(try sqliteRows(path, "SELECT total_size, total_crc FROM sync_chunks") == ["-1|-1"])
        let bytes: [UInt8] = [9, 9, 9, 9]
        let entry = WireEntry(key: TestKeys.blob.name, version: HLCTimestamp(packed: 5, node: 77), base: .zero, deleted: false,
                              encoding: TestKeys.blob.descriptor.encoding, value: [])
        let chunk = SyncMessage.Chunk(entry: entry, totalSize: 8, totalChecksum: 1, index: 1, count: 2, checksum: Checksum.crc32(bytes), bytes: bytes)
        #expect(try store.stageChunk(chunk, encrypted: false) == StagedChunks(contiguous: 0, replacedAnotherValue: true))
        #expect(try sqliteRows(path, "SELECT idx, total_size, total_crc FROM sync_chunks") == ["1|8|1"])
    }

    /// A v9 file (entries and staged chunks in WITHOUT ROWID tables, where a
    /// lookup reads every large value it passes) moves to v10: rowid tables,
    /// the value last, every row, index, pending change and staged chunk kept.
    @Test func v9RowsMoveToRowidTablesWithTheValueLast() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))
        let path = folder.file("phone.sqlite")
        let scratch = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        let large = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        try await scratch.set(large, for: TestKeys.blob)             // over the limit: waits for sync()
        try await scratch.set(5, for: TestKeys.steps)                // automatic, pending
        try await scratch.set("s3cret", for: TestKeys.secret)        // encrypted at rest
        try await scratch.set("gone", for: TestKeys.units)
        try await scratch.remove(TestKeys.units)                     // a tombstone
        let before = try scratch.allEntryInfo()
        scratch.close()

        try sqlite(path) { db in
            // Back to v9's tables, with the same rows.
            try exec(db, """
                CREATE TABLE v9_entries (key TEXT PRIMARY KEY NOT NULL, value BLOB, encoding TEXT NOT NULL, ver INTEGER NOT NULL,
                    node INTEGER NOT NULL, base_ver INTEGER NOT NULL, base_node INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
                    encrypted INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL, change_seq INTEGER NOT NULL DEFAULT 0,
                    lane INTEGER NOT NULL DEFAULT 0, written_at INTEGER NOT NULL, in_file INTEGER NOT NULL DEFAULT 0,
                    origin_peer INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
                INSERT INTO v9_entries SELECT key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq,
                    lane, written_at, in_file, origin_peer FROM entries;
                DROP TABLE entries;
                ALTER TABLE v9_entries RENAME TO entries;
                CREATE INDEX sync_stream ON entries(change_seq) WHERE lane IN (1, 3);
                CREATE INDEX sync_tombstones ON entries(ver) WHERE deleted = 1;
                DROP TABLE sync_chunks;
                CREATE TABLE sync_chunks (key TEXT NOT NULL, ver INTEGER NOT NULL, node INTEGER NOT NULL, idx INTEGER NOT NULL,
                    data BLOB NOT NULL, total_size INTEGER NOT NULL DEFAULT -1, total_crc INTEGER NOT NULL DEFAULT -1,
                    PRIMARY KEY (key, ver, node, idx)) WITHOUT ROWID;
                INSERT INTO sync_chunks(key, ver, node, idx, data, total_size, total_crc) VALUES ('blob', 7, 77, 0, x'0001020304', 10, 99);
                PRAGMA user_version = 9;
                """)
        }
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%WITHOUT ROWID%' AND name IN ('entries', 'sync_chunks')") == 2)

        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try sqliteInt(path, "PRAGMA user_version") == Int64(Schema.currentVersion))
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%WITHOUT ROWID%' AND name IN ('entries', 'sync_chunks')") == 0)
        #expect(try sqliteRows(path, "SELECT name FROM pragma_table_info('entries') ORDER BY cid DESC LIMIT 1") == ["value"])
        #expect(try sqliteRows(path, "SELECT name FROM pragma_table_info('sync_chunks') ORDER BY cid DESC LIMIT 1") == ["data"])
        #expect(try sqliteRows(path, "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'sync_%' AND tbl_name = 'entries' ORDER BY name")
                == ["sync_stream", "sync_tombstones"])
        #expect(try phone.allEntryInfo() == before)
        #expect(try phone.storedValue(for: TestKeys.blob) == large)
        #expect(try phone.storedValue(for: TestKeys.secret) == "s3cret")
        #expect(try sqliteRows(path, "SELECT key, ver, node, idx, hex(data), total_size, total_crc FROM sync_chunks") == ["blob|7|77|0|0001020304|10|99"])
        // The stream goes on: a new write follows the migrated ones, and the upsert keeps one row per key.
        try await phone.set(6, for: TestKeys.steps)
        #expect(try phone.storedValue(for: TestKeys.steps) == 6)
        #expect(try sqliteInt(path, "SELECT count(*) FROM entries WHERE key = 'health:daily:steps'") == 1)
        #expect(try phone.entryInfo(forKey: TestKeys.steps.name)?.changeSequence ?? 0 > before.map(\.changeSequence).max() ?? 0)
        phone.close()
    }

    /// A v11 file's commit log (AUTOINCREMENT, its counter in `sqlite_sequence`)
    /// becomes a plain rowid table at open: its rows keep their ids, the
    /// counter's row goes, and the next commit's row follows the largest id,
    /// so another connection that read the log up to there misses nothing.
    @Test func v11CommitLogKeepsItsIdsWithoutACounter() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let path = folder.file("phone.sqlite")
        var noPolling = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))
        noPolling.externalChangePollInterval = nil
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: noPolling)
            for value in 1...3 { try await store.set(value, for: TestKeys.steps) }
            store.close()
        }
        // Back to v11: the log as v2 made it, with its rows and their counter.
        try sqlite(path) { db in
            try exec(db, "ALTER TABLE sync_commit_log RENAME TO sync_commit_log_v11")
            try exec(db, "CREATE TABLE sync_commit_log (id INTEGER PRIMARY KEY AUTOINCREMENT, changes BLOB NOT NULL)")
            try exec(db, "INSERT INTO sync_commit_log(id, changes) SELECT id, changes FROM sync_commit_log_v11")
            try exec(db, "DROP TABLE sync_commit_log_v11")
            try exec(db, "PRAGMA user_version = 11")
        }
        let logged = try sqliteRows(path, "SELECT id, hex(changes) FROM sync_commit_log ORDER BY id")
        let newest = try sqliteInt(path, "SELECT max(id) FROM sync_commit_log")
        #expect(logged.count >= 3)
        #expect(try sqliteInt(path, "SELECT seq FROM sqlite_sequence WHERE name = 'sync_commit_log'") == newest)

        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: noPolling)
        #expect(try sqliteInt(path, "PRAGMA user_version") == Int64(Schema.currentVersion))
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_master WHERE name = 'sync_commit_log' AND sql LIKE '%AUTOINCREMENT%'") == 0)
        #expect(try sqliteInt(path, "SELECT count(*) FROM sqlite_sequence WHERE name = 'sync_commit_log'") == 0)
        #expect(try sqliteRows(path, "SELECT id, hex(changes) FROM sync_commit_log ORDER BY id") == logged)
        // Another connection to the file, caught up with the migrated log, sees the next commit.
        let other = try SyncStore(path: path, role: .phone, registry: registry, options: noPolling)
        #expect(try other.value(for: TestKeys.steps) == 3)
        let changes = other.changes(for: TestKeys.steps)
        try await phone.set(4, for: TestKeys.steps)
        #expect(try sqliteInt(path, "SELECT max(id) FROM sync_commit_log") == newest + 1)
        try other.checkForExternalChanges()
        let change = try await first(of: changes, "the other connection's change")
        #expect(change.isFromAnotherProcess == true && change.kind == .set)
        #expect(try other.value(for: TestKeys.steps) == 4)
        other.close()
        phone.close()
    }
}

private func sqlite(_ path: String, _ body: (OpaquePointer) throws -> Void) throws {
    var handle: OpaquePointer?
    guard sqlite3_open(path, &handle) == SQLITE_OK, let db = handle else { throw SyncError(.database, "cannot open \(path)") }
    defer { sqlite3_close(db) }
    try body(db)
}

private func exec(_ db: OpaquePointer, _ sql: String) throws {
    guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
        throw SyncError(.database, "\(String(cString: sqlite3_errmsg(db))) in \(sql.prefix(80))")
    }
}

private func sqliteRows(_ path: String, _ sql: String) throws -> [String] {
    var rows: [String] = []
    try sqlite(path) { db in
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK else { throw SyncError(.database, String(cString: sqlite3_errmsg(db))) }
        defer { sqlite3_finalize(stmt) }
        while sqlite3_step(stmt) == SQLITE_ROW {
            rows.append((0..<sqlite3_column_count(stmt)).map { sqlite3_column_text(stmt, $0).map { String(cString: $0) } ?? "NULL" }
                .joined(separator: "|"))
        }
    }
    return rows
}

private func sqliteInt(_ path: String, _ sql: String) throws -> Int64 {
    Int64(try sqliteRows(path, sql).first ?? "") ?? -1
}

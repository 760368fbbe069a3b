import CSQLite
import Foundation
@testable import SyncEngine
import Testing

/// Stores written by an earlier schema open with their data and their queue intact.
@Suite struct SchemaMigrationTests {
    /// A schema-v2 file (changes queued with `acked_seq` and a partial index)
    /// migrates to v3's `sync_outbox`: what waited still waits, what the peer
    /// acknowledged is not sent again, and two queued rows that share a sequence
    /// (never written by this engine, but possible in a damaged file) both stay queued.
    @Test func v2QueueMovesToTheOutbox() async throws {
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
        }
        let oldHighest = try sqliteInt(path, "SELECT max(change_seq) FROM entries")

        let phone = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try sqliteInt(path, "PRAGMA user_version") == 4)
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
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry,
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("watch.key"))))
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
        #expect(try sqliteInt(path, "SELECT count(*) FROM sync_outbox") == 0)
    }

    /// The outbox follows every write: a newer local change replaces the queued
    /// one, a value taken from the peer unqueues it, and an acknowledgement of
    /// an older change leaves the newer one queued.
    @Test func outboxFollowsWritesAndAcknowledgements() async throws {
        let pair = try Pair()
        let phonePath = pair.folder.file("phone.sqlite")
        try await pair.phone.set(1, for: TestKeys.steps)
        let first = try #require(try pair.phone.entryInfo(forKey: "health:daily:steps")).changeSequence
        try await pair.phone.set(2, for: TestKeys.steps)
        let second = try #require(try pair.phone.entryInfo(forKey: "health:daily:steps")).changeSequence
        #expect(try sqliteRows(phonePath, "SELECT seq, key FROM sync_outbox") == ["\(second)|health:daily:steps"])

        // A late acknowledgement of the first change: the second still waits.
        try pair.phone.acknowledge([("health:daily:steps", first)], peerNode: 1)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == true)
        try pair.phone.acknowledge([("health:daily:steps", second)], peerNode: 1)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == false)

        // A newer value from the watch replaces a queued local change: nothing is left to send.
        try await pair.phone.set(3, for: TestKeys.steps)
        pair.watchClock.advance(by: 60_000)
        try await pair.watch.set(4, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 4)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 4)
        #expect(try sqliteInt(phonePath, "SELECT count(*) FROM sync_outbox") == 0)
        #expect(try pair.phone.pendingSummary().total == 0)
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

import CSQLite
import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// The rows other processes read to learn what a write transaction changed
/// (`sync_commit_log`): both formats read back exactly, damage is refused,
/// and a large transaction's row stays small.
@Suite struct CommitLogRecordTests {
    static func change(_ key: String, _ kind: StoreChange.Kind = .set, _ origin: StoreChange.Origin = .local,
                       packed: Int64, node: UInt32) -> StoreChange {
        StoreChange(key: key, kind: kind, origin: origin, version: HLCTimestamp(packed: packed, node: node), isFromAnotherProcess: true)
    }

    /// Keys sharing prefixes (one splitting a two-byte character), a key that
    /// is a prefix of the one before, removals, remote changes, versions that
    /// go back, nodes that change and come back, the largest packed time.
    static let varied = CommitLogRecord(sequenceHigh: 1 << 40, clockLatest: 123_456_789 << 16, changes: [
        change("steps:day:2024-01-01", packed: 100 << 16, node: 7),
        change("steps:day:2024-01-02", packed: (100 << 16) + 1, node: 7),
        change("steps:day:2024-01", .removed, packed: (100 << 16) + 2, node: 7),
        change("café", .set, .remote, packed: 99 << 16, node: 0xFFFF_FFFF),
        change("caf\u{00EA}", .removed, .remote, packed: HLCTimestamp.maxPacked, node: 0xFFFF_FFFF),
        change("", packed: 0, node: 0),
        change("profile:name", packed: 5, node: 7),
    ])

    @Test func theCompactFormatReadsBackExactly() throws {
        let record = Self.varied
        #expect(try CommitLogRecord(record.encoded(), format: 2) == record)
        #expect(try CommitLogRecord(CommitLogRecord(sequenceHigh: 0, clockLatest: 0, changes: []).encoded(), format: 2).changes.isEmpty)
    }

    /// Rows an older build wrote (and still writes, naming no format) read as before.
    @Test func theFirstFormatStillReads() throws {
        let record = Self.varied
        #expect(try CommitLogRecord(Self.firstFormat(record), format: 1) == record)
    }

    /// A truncated row, one with bytes after its changes, one whose key shares
    /// more than the previous key has, one whose key is not UTF-8, one that
    /// claims more changes than any transaction makes, and a format this
    /// build does not know: each throws (the reader then drops its whole cache).
    @Test func aDamagedRowIsRefused() throws {
        let bytes = Self.varied.encoded()
        for cut in [1, 9, 12, bytes.count / 2, bytes.count - 1] {
            #expect(throws: (any Error).self, "cut at \(cut)") { try CommitLogRecord(Array(bytes.prefix(cut)), format: 2) }
        }
        #expect(throws: (any Error).self) { try CommitLogRecord(bytes + [0], format: 2) }
        #expect(throws: (any Error).self) { try CommitLogRecord(bytes, format: 3) }
        var header = ByteWriter()
        header.writeVarInt(1)
        header.writeUInt64(0)
        var overShared = header
        overShared.writeVarInt(1)
        overShared.writeUInt8(0)
        overShared.writeVarInt(1)  // shares a byte with no previous key
        overShared.writeBytes([0x61])
        overShared.writeVarInt(0)
        #expect(throws: (any Error).self) { try CommitLogRecord(overShared.bytes, format: 2) }
        var notUTF8 = header
        notUTF8.writeVarInt(1)
        notUTF8.writeUInt8(0)
        notUTF8.writeVarInt(0)
        notUTF8.writeBytes([0xC3])
        notUTF8.writeVarInt(0)
        #expect(throws: (any Error).self) { try CommitLogRecord(notUTF8.bytes, format: 2) }
        var tooMany = ByteWriter()
        tooMany.writeVarInt(1)
        tooMany.writeUInt64(0)
        tooMany.writeVarInt(UInt64(CommitLogRecord.maxChanges) + 1)
        #expect(throws: (any Error).self) { try CommitLogRecord(tooMany.bytes, format: 2) }
    }

    /// A batch of 2,000 keys of one family logs its changes in a few bytes
    /// each (format 1 took 27 and more: every key whole, a 12-byte version).
    @Test func aLargeTransactionsRowIsSmall() throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("phone.key"))))
        try store.batchNow { batch in
            for i in 0..<2_000 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
        }
        store.close()
        let length = try Self.int(path, "SELECT length(changes) FROM sync_commit_log ORDER BY id DESC LIMIT 1")
        #expect(length > 2_000 && length <= 2_000 * 7, "\(length) bytes")
    }

    /// A row an older build inserts into the v12 table (naming no format) is
    /// read as format 1 by the store's next look: its change reaches observers.
    @Test func aRowOfAnOlderBuildReachesObservers() async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        var options = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))
        options.externalChangePollInterval = nil
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        try store.setNow(1, for: TestKeys.steps)
        let changes = store.changes(for: TestKeys.steps)
        let info = try #require(try store.entryInfo(forKey: TestKeys.steps.name))
        let old = CommitLogRecord(sequenceHigh: info.changeSequence, clockLatest: info.version.packed,
                                  changes: [Self.change(TestKeys.steps.name, packed: info.version.packed, node: info.version.node)])
        var handle: OpaquePointer?
        #expect(sqlite3_open(path, &handle) == SQLITE_OK)
        var insert: OpaquePointer?
        #expect(sqlite3_prepare_v2(handle, "INSERT INTO sync_commit_log(changes) VALUES(?)", -1, &insert, nil) == SQLITE_OK)
        let bytes = Self.firstFormat(old)
        _ = bytes.withUnsafeBytes { sqlite3_bind_blob(insert, 1, $0.baseAddress, Int32($0.count), sqliteTransient) }
        #expect(sqlite3_step(insert) == SQLITE_DONE)
        sqlite3_finalize(insert)
        sqlite3_close(handle)
        try store.checkForExternalChanges()
        let change = try await first(of: changes, "the older build's change")
        #expect(change.isFromAnotherProcess && change.version == info.version)
        store.close()
    }

    /// Format 1, as builds before schema v12 encode a record.
    static func firstFormat(_ record: CommitLogRecord) -> [UInt8] {
        var writer = ByteWriter()
        writer.writeVarInt(UInt64(max(record.sequenceHigh, 0)))
        writer.writeUInt64(UInt64(bitPattern: record.clockLatest))
        writer.writeVarInt(UInt64(record.changes.count))
        for change in record.changes {
            writer.writeString(change.key)
            writer.writeUInt8(change.kind == .set ? 0 : 1)
            writer.writeUInt8(change.origin == .local ? 0 : 1)
            writer.writeUInt64(UInt64(bitPattern: change.version.packed))
            writer.writeUInt32(change.version.node)
        }
        return writer.bytes
    }

    static func int(_ path: String, _ sql: String) throws -> Int {
        var handle: OpaquePointer?
        guard sqlite3_open(path, &handle) == SQLITE_OK, let db = handle else { throw SyncError(.database, "cannot open \(path)") }
        defer { sqlite3_close(db) }
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK else { throw SyncError(.database, String(cString: sqlite3_errmsg(db))) }
        defer { sqlite3_finalize(stmt) }
        guard sqlite3_step(stmt) == SQLITE_ROW else { throw SyncError(.database, "no row") }
        return Int(sqlite3_column_int64(stmt, 0))
    }
}

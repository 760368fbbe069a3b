import CSQLite
import Foundation

/// What a store file holds, read without opening it as a store: for tools
/// such as `syncsim inspect`. No registry is needed, nothing is written and
/// nothing is migrated (an older file is read as it is).
public struct StoreFileSnapshot: Sendable {
    /// One row of `entries`.
    public struct Entry: Sendable {
        public var key: String
        public var version: HLCTimestamp
        public var isDeleted: Bool
        public var isEncrypted: Bool
        /// The serialized value's size in bytes.
        public var size: Int
        public var encoding: String
        /// The local change that wrote the entry.
        public var changeSeq: Int64
        /// True while the change `changeSeq` waits for `sync()` or for a peer's acknowledgement.
        public var isPending: Bool
        /// The replication lane as stored: 0 none, 1 automatic, 2 manual waiting for `sync()`, 3 manual released.
        public var lane: Int
        /// The stored bytes, only when asked for, and never for encrypted or deleted rows
        /// (a `FileValueStore`'s from its value file; nil when that file is missing or damaged).
        public var value: [UInt8]?
    }

    /// A peer's checkpoint: the highest change of this store it acknowledged.
    public struct Peer: Sendable {
        public var nodeID: UInt32
        public var role: String
        public var epoch: String
        public var ackedThrough: Int64
    }

    /// One conflict resolution.
    public struct Conflict: Sendable {
        public var key: String
        public var local: HLCTimestamp
        public var remote: HLCTimestamp
        public var winner: String
        public var rule: String
    }

    /// The store's node id and role (nil in a file that has none yet).
    public var nodeID: UInt32?
    public var role: String?
    /// Every entry, by key.
    public var entries: [Entry]
    /// Every known peer, by node id.
    public var peers: [Peer]
    /// The conflict log, oldest first.
    public var conflicts: [Conflict]
    /// On a watch being re-baselined, the keys the phone's notice marked:
    /// each goes once the baseline came, unless it sends the key again
    /// (schema v8; empty before).
    public var rebaselineMarks: [String] = []

    /// The entries waiting for the peer, in change order.
    public var pending: [Entry] { entries.filter(\.isPending).sorted { $0.changeSeq < $1.changeSeq } }
}

extension SyncStore {
    /// Reads the store file at `path` read-only. Values are left out unless
    /// `includeValues`, and those of encrypted entries always are.
    ///
    /// Throws `.database` for a file that is missing or cannot be opened, and
    /// `.notADatabase` for one that is not a SyncEngine store.
    public static func inspect(path: String, includeValues: Bool = false) throws -> StoreFileSnapshot {
        guard FileManager.default.fileExists(atPath: path) else { throw SyncError(.database, "no such file: \(path)") }
        // SQLite's open of a FIFO waits for a writer: only a regular file can be a store.
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw SyncError(.notADatabase, "\(path) is not a regular file (a directory, a FIFO or a device), so no SyncEngine store")
        }
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK, let db = handle else {
            sqlite3_close(handle)
            throw SyncError(.database, "cannot open \(path) as SQLite")
        }
        defer { sqlite3_close(db) }
        func query(_ sql: String, _ row: (OpaquePointer) -> Void) throws {
            var stmt: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK, let stmt else {
                throw SyncError(.notADatabase, "\(path) is not a SyncEngine store (\(String(cString: sqlite3_errmsg(db))))")
            }
            defer { sqlite3_finalize(stmt) }
            var step = sqlite3_step(stmt)
            while step == SQLITE_ROW {
                row(stmt)
                step = sqlite3_step(stmt)
            }
            // A damaged page ends the listing with an error, not with a shorter listing.
            guard step == SQLITE_DONE else {
                let code: SyncError.Code = step == SQLITE_CORRUPT || step == SQLITE_NOTADB ? .databaseCorrupt : .database
                throw SyncError(code, "cannot read \(path): \(String(cString: sqlite3_errmsg(db))); the listing would be incomplete")
            }
        }
        func text(_ s: OpaquePointer, _ i: Int32) -> String { sqlite3_column_text(s, i).map { String(cString: $0) } ?? "" }
        func version(_ s: OpaquePointer, _ i: Int32, _ j: Int32) -> HLCTimestamp {
            HLCTimestamp(packed: sqlite3_column_int64(s, i), node: UInt32(truncatingIfNeeded: sqlite3_column_int64(s, j)))
        }
        var meta: [String: String] = [:]
        try query("SELECT name, value FROM sync_meta WHERE name IN ('node_id', 'role', 'value_directory')") { meta[text($0, 0)] = text($0, 1) }
        // Schema v5 streams changes to each peer from its cursor (sync_peers.acked_through): pending =
        // waiting for sync(), or in the stream after the least caught-up peer's cursor (a change taken
        // from the only peer is never sent back to it). v3 and v4 queue changes in sync_outbox; older
        // files mark them with acked_seq.
        var hasOutbox = false
        var hasOrigin = false
        try query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sync_outbox'") { _ in hasOutbox = true }
        try query("SELECT 1 FROM pragma_table_info('entries') WHERE name = 'origin_peer'") { _ in hasOrigin = true }
        var hasInFile = false
        try query("SELECT 1 FROM pragma_table_info('entries') WHERE name = 'in_file'") { _ in hasInFile = true }
        let pendingColumn = hasOutbox
            ? "e.lane > 0 AND EXISTS (SELECT 1 FROM sync_outbox o WHERE o.seq = e.change_seq AND o.key = e.key)"
            : hasOrigin
            ? """
              (e.lane = 2 OR (e.lane IN (1, 3) AND e.change_seq > coalesce((SELECT min(acked_through) FROM sync_peers), 0)
                AND NOT (e.origin_peer != 0 AND (SELECT count(*) FROM sync_peers) = 1 AND e.origin_peer = (SELECT peer_node FROM sync_peers))))
              """
            : "e.lane > 0 AND e.change_seq > e.acked_seq"
        var entries: [StoreFileSnapshot.Entry] = []
        let inFileColumn = hasInFile ? "in_file" : "0"
        try query("SELECT key, ver, node, deleted, encrypted, size, encoding, change_seq, \(pendingColumn), lane, value, \(inFileColumn) FROM entries e ORDER BY key") { s in
            let deleted = sqlite3_column_int(s, 3) != 0
            let encrypted = sqlite3_column_int(s, 4) != 0
            var value: [UInt8]?
            if includeValues && !encrypted && !deleted {
                if sqlite3_column_int(s, 11) != 0 {
                    // A `FileValueStore`'s value is in its file (nil when the file is missing or damaged).
                    value = meta["value_directory"].flatMap { directory in
                        FileManager.default.contents(atPath: directory + "/" + ValueFiles.fileName(key: text(s, 0), version: version(s, 1, 2)))
                    }.flatMap { ValueFiles.withoutTrailer([UInt8]($0)) }
                } else if sqlite3_column_type(s, 10) != SQLITE_NULL {
                    // An empty value is a zero-length blob, for which SQLite gives no pointer.
                    let count = Int(sqlite3_column_bytes(s, 10))
                    value = count == 0 ? [] : [UInt8](UnsafeRawBufferPointer(start: sqlite3_column_blob(s, 10), count: count))
                }
            }
            entries.append(StoreFileSnapshot.Entry(
                key: text(s, 0), version: version(s, 1, 2), isDeleted: deleted, isEncrypted: encrypted, size: Int(clamping: sqlite3_column_int64(s, 5)),
                encoding: text(s, 6), changeSeq: sqlite3_column_int64(s, 7), isPending: sqlite3_column_int(s, 8) != 0,
                lane: Int(sqlite3_column_int(s, 9)), value: value))
        }
        var peers: [StoreFileSnapshot.Peer] = []
        try query("SELECT peer_node, peer_role, epoch, acked_through FROM sync_peers ORDER BY peer_node") { s in
            peers.append(StoreFileSnapshot.Peer(nodeID: UInt32(truncatingIfNeeded: sqlite3_column_int64(s, 0)), role: text(s, 1),
                                                epoch: text(s, 2), ackedThrough: sqlite3_column_int64(s, 3)))
        }
        var conflicts: [StoreFileSnapshot.Conflict] = []
        try query("SELECT key, local_ver, local_node, remote_ver, remote_node, winner, rule FROM sync_conflicts ORDER BY id") { s in
            conflicts.append(StoreFileSnapshot.Conflict(key: text(s, 0), local: version(s, 1, 2), remote: version(s, 3, 4),
                                                        winner: text(s, 5), rule: text(s, 6)))
        }
        var hasMarks = false
        try query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sync_rebaseline_marks'") { _ in hasMarks = true }
        var marks: [String] = []
        if hasMarks { try query("SELECT key FROM sync_rebaseline_marks ORDER BY key") { marks.append(text($0, 0)) } }
        return StoreFileSnapshot(nodeID: meta["node_id"].flatMap { UInt32($0) }, role: meta["role"], entries: entries, peers: peers,
                                 conflicts: conflicts, rebaselineMarks: marks)
    }
}

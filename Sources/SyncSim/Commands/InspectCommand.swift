import ArgumentParser
import CSQLite
import Foundation
import SyncEngine

/// `syncsim inspect DB [--values] [--json]`: a store file's entries,
/// checkpoints, pending queue and conflict log, read directly with SQLite
/// (no registry needed). Values are elided unless `--values`; values of
/// encrypted rows are never printed.
public struct InspectCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "inspect", abstract: "Show a store file: entries (values elided), checkpoints, pending queue, conflict log.")

    @Argument(help: "The store's SQLite file.")
    var db: String

    @Flag(help: "Show values (never those of encrypted keys).")
    var values = false

    @Flag(help: "Print JSON.")
    var json = false

    public init() {}

    public func run() throws {
        let inspection: StoreInspection
        do {
            inspection = try StoreInspection(path: db, includeValues: values)
        } catch {
            throw ValidationError("\(error)")
        }
        print(json ? inspection.json : inspection.text, terminator: "")
    }
}

/// What `syncsim inspect` shows of a store file.
public struct StoreInspection: Sendable, Codable {
    public struct Entry: Sendable, Codable {
        public var key: String
        public var version: String
        public var deleted: Bool
        public var encrypted: Bool
        public var size: Int
        public var encoding: String
        public var changeSeq: Int64
        /// True while the change `changeSeq` waits for the peer's acknowledgement.
        public var pending: Bool
        public var lane: Int
        /// The value (UTF-8 text or hex), only with `--values` and never for encrypted rows.
        public var value: String?
    }

    public struct Peer: Sendable, Codable {
        public var node: String
        public var role: String
        public var epoch: String
        public var ackedThrough: Int64
    }

    public struct Conflict: Sendable, Codable {
        public var key: String
        public var localVersion: String
        public var remoteVersion: String
        public var winner: String
        public var rule: String
    }

    public var node: String
    public var role: String
    public var entries: [Entry]
    public var checkpoints: [Peer]
    public var pending: [Entry]
    public var conflicts: [Conflict]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads the file at `path` read-only.
    public init(path: String, includeValues: Bool) throws {
        guard FileManager.default.fileExists(atPath: path) else { throw Failure(description: "no such file: \(path)") }
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK, let db = handle else {
            sqlite3_close(handle)
            throw Failure(description: "cannot open \(path) as SQLite")
        }
        defer { sqlite3_close(db) }
        func query(_ sql: String, _ row: (OpaquePointer) -> Void) throws {
            var stmt: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK, let stmt else {
                throw Failure(description: "\(path) is not a SyncEngine store (\(String(cString: sqlite3_errmsg(db))))")
            }
            defer { sqlite3_finalize(stmt) }
            while sqlite3_step(stmt) == SQLITE_ROW { row(stmt) }
        }
        func text(_ s: OpaquePointer, _ i: Int32) -> String { sqlite3_column_text(s, i).map { String(cString: $0) } ?? "" }
        func version(_ s: OpaquePointer, _ i: Int32, _ j: Int32) -> String {
            HLCTimestamp(packed: sqlite3_column_int64(s, i), node: UInt32(truncatingIfNeeded: sqlite3_column_int64(s, j))).description
        }
        var meta: [String: String] = [:]
        try query("SELECT name, value FROM sync_meta WHERE name IN ('node_id', 'role')") { meta[text($0, 0)] = text($0, 1) }
        node = UInt32(meta["node_id"] ?? "").map { String($0, radix: 16) } ?? "?"
        role = meta["role"] ?? "?"
        var entries: [Entry] = []
        // Schema v5 streams changes to each peer from its cursor (sync_peers.acked_through):
        // pending = in the stream after the least caught-up peer's cursor, or waiting for sync().
        let pendingColumn = """
            (e.lane = 2 OR (e.lane IN (1, 3) AND e.change_seq > coalesce((SELECT min(acked_through) FROM sync_peers), 0)
              AND NOT (e.origin_peer != 0 AND (SELECT count(*) FROM sync_peers) = 1 AND e.origin_peer = (SELECT peer_node FROM sync_peers))))
            """
        try query("SELECT key, ver, node, deleted, encrypted, size, encoding, change_seq, \(pendingColumn), lane, value FROM entries e ORDER BY key") { s in
            let encrypted = sqlite3_column_int(s, 4) != 0
            var value: String?
            if includeValues && !encrypted && sqlite3_column_int(s, 3) == 0, let blob = sqlite3_column_blob(s, 10) {
                let bytes = [UInt8](UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(s, 10))))
                value = StoreInspection.show(bytes)
            }
            entries.append(Entry(key: text(s, 0), version: version(s, 1, 2), deleted: sqlite3_column_int(s, 3) != 0, encrypted: encrypted,
                                 size: Int(sqlite3_column_int64(s, 5)), encoding: text(s, 6), changeSeq: sqlite3_column_int64(s, 7),
                                 pending: sqlite3_column_int(s, 8) != 0, lane: Int(sqlite3_column_int(s, 9)), value: value))
        }
        self.entries = entries
        pending = entries.filter(\.pending).sorted { $0.changeSeq < $1.changeSeq }
        var peers: [Peer] = []
        try query("SELECT peer_node, peer_role, epoch, acked_through FROM sync_peers ORDER BY peer_node") { s in
            peers.append(Peer(node: String(UInt32(truncatingIfNeeded: sqlite3_column_int64(s, 0)), radix: 16), role: text(s, 1),
                              epoch: text(s, 2), ackedThrough: sqlite3_column_int64(s, 3)))
        }
        checkpoints = peers
        var conflicts: [Conflict] = []
        try query("SELECT key, local_ver, local_node, remote_ver, remote_node, winner, rule FROM sync_conflicts ORDER BY id") { s in
            conflicts.append(Conflict(key: text(s, 0), localVersion: version(s, 1, 2), remoteVersion: version(s, 3, 4), winner: text(s, 5), rule: text(s, 6)))
        }
        self.conflicts = conflicts
    }

    static func show(_ bytes: [UInt8]) -> String {
        let shown = bytes.prefix(200)
        let suffix = bytes.count > 200 ? "… (\(bytes.count) bytes)" : ""
        if let text = String(validating: shown, as: UTF8.self), !text.unicodeScalars.contains(where: { $0.value < 0x20 }) {
            return text + suffix
        }
        return shown.map { String(format: "%02x", $0) }.joined() + suffix
    }

    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self) + "\n"
    }

    public var text: String {
        let lanes = ["none", "auto", "manual"]
        var out = "store: \(role) node \(node)\n\nentries (\(entries.count)):\n"
        let showValues = entries.contains { $0.value != nil }
        var rows = [["key", "version", "state", "size", "seq", "pending", "lane"] + (showValues ? ["value"] : [])]
        for e in entries {
            let state = e.deleted ? "deleted" : e.encrypted ? "encrypted" : "live"
            var row = [e.key, e.version, state, "\(e.size)", "\(e.changeSeq)", e.pending ? "yes" : "", lanes[max(0, min(2, e.lane))]]
            if showValues { row.append(e.encrypted ? "(encrypted)" : e.deleted ? "" : (e.value ?? "")) }
            rows.append(row)
        }
        out += SimReport.table(rows)
        out += "\ncheckpoints (\(checkpoints.count)):\n"
        out += SimReport.table([["peer", "role", "epoch", "acked through"]] + checkpoints.map { [$0.node, $0.role, $0.epoch, "\($0.ackedThrough)"] })
        out += "\npending (\(pending.count)):\n"
        out += SimReport.table([["key", "seq", "lane", "size"]] + pending.map { [$0.key, "\($0.changeSeq)", lanes[max(0, min(2, $0.lane))], "\($0.size)"] })
        out += "\nconflicts (\(conflicts.count)):\n"
        out += SimReport.table([["key", "local", "remote", "winner", "rule"]] + conflicts.map { [$0.key, $0.localVersion, $0.remoteVersion, $0.winner, $0.rule] })
        return out
    }
}

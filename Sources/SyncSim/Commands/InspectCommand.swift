import ArgumentParser
import Foundation
import SyncEngine

/// `syncsim inspect DB [--values] [--json]`: a store file's entries,
/// checkpoints, pending queue and conflict log, read with
/// `SyncStore.inspect` (read-only, no registry needed). Values are elided unless `--values`; values of
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
            throw CommandFailure(exitCode: Simulation.Exit.badInput, error.message)
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
    /// Keys a re-baseline notice marked: each goes once the baseline came,
    /// unless it sends the key again.
    public var rebaselineMarks: [String]

    /// Reads the file at `path` read-only (`SyncStore.inspect`).
    public init(path: String, includeValues: Bool) throws {
        let snapshot = try SyncStore.inspect(path: path, includeValues: includeValues)
        node = snapshot.nodeID.map { String($0, radix: 16) } ?? "?"
        role = snapshot.role ?? "?"
        entries = snapshot.entries.map { e in
            Entry(key: e.key, version: e.version.description, deleted: e.isDeleted, encrypted: e.isEncrypted, size: e.size,
                  encoding: e.encoding, changeSeq: e.changeSeq, pending: e.isPending, lane: e.lane, value: e.value.map(StoreInspection.show))
        }
        pending = entries.filter(\.pending).sorted { $0.changeSeq < $1.changeSeq }
        checkpoints = snapshot.peers.map { Peer(node: String($0.nodeID, radix: 16), role: $0.role, epoch: $0.epoch, ackedThrough: $0.ackedThrough) }
        rebaselineMarks = snapshot.rebaselineMarks
        conflicts = snapshot.conflicts.map {
            Conflict(key: $0.key, localVersion: $0.local.description, remoteVersion: $0.remote.description, winner: $0.winner, rule: $0.rule)
        }
    }

    /// A value as text when it is UTF-8 without control characters (C0, DEL, C1), else in hex; 200 bytes at most.
    static func show(_ bytes: [UInt8]) -> String {
        let shown = bytes.prefix(200)
        let suffix = bytes.count > 200 ? "… (\(bytes.count) bytes)" : ""
        if let text = String(validating: shown, as: UTF8.self), !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return text + suffix
        }
        return shown.map { String(format: "%02x", $0) }.joined() + suffix
    }

    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return VisibleText.escapingInvisibles(inJSON: String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)) + "\n"
    }

    public var text: String {
        let lanes = ["none", "auto", "manual", "released"]
        var out = "store: \(role) node \(node)\n\nentries (\(entries.count)):\n"
        let showValues = entries.contains { $0.value != nil }
        var rows = [["key", "version", "state", "size", "seq", "pending", "lane"] + (showValues ? ["value"] : [])]
        for e in entries {
            let state = e.deleted ? "deleted" : e.encrypted ? "encrypted" : "live"
            var row = [VisibleText.name(e.key), e.version, state, "\(e.size)", "\(e.changeSeq)", e.pending ? "yes" : "", lanes[max(0, min(3, e.lane))]]
            if showValues { row.append(e.encrypted ? "(encrypted)" : e.deleted ? "" : (e.value ?? "")) }
            rows.append(row)
        }
        out += SimReport.table(rows)
        out += "\ncheckpoints (\(checkpoints.count)):\n"
        out += SimReport.table([["peer", "role", "epoch", "acked through"]] + checkpoints.map { [$0.node, $0.role, $0.epoch, "\($0.ackedThrough)"] })
        out += "\npending (\(pending.count)):\n"
        out += SimReport.table([["key", "seq", "lane", "size"]] + pending.map { [VisibleText.name($0.key), "\($0.changeSeq)", lanes[max(0, min(3, $0.lane))], "\($0.size)"] })
        out += "\nconflicts (\(conflicts.count)):\n"
        out += SimReport.table([["key", "local", "remote", "winner", "rule"]] + conflicts.map { [VisibleText.name($0.key), $0.localVersion, $0.remoteVersion, $0.winner, $0.rule] })
        if !rebaselineMarks.isEmpty {
            out += "\nre-baseline marks (\(rebaselineMarks.count)), removed once the baseline came unless it sends them again:\n"
            out += rebaselineMarks.map { "  \(VisibleText.name($0))\n" }.joined()
        }
        return out
    }
}

import Foundation
@_spi(Testing) import SyncEngine
import SyncTransport

/// The outcome of one run: per-node traffic and per-invariant results.
/// Holds no wall-clock times, paths or random ids, so the same scenario and
/// seed give the same report.
public struct SimReport: Sendable, Equatable, Codable {
    /// One node's figures.
    public struct Node: Sendable, Equatable, Codable {
        public var role: String
        public var nodeID: String
        /// Live entries at the end.
        public var entries: Int
        public var tombstones: Int
        public var entriesSent: Int
        public var entriesReceived: Int
        /// Envelope bytes this node put on the wire (after compression).
        public var bytesOnWire: Int
        /// Payload bytes before compression.
        public var payloadBytes: Int
        /// payload ÷ wire.
        public var compressionRatio: Double
        public var framesSent: Int
        public var framesDropped: Int
        public var conflicts: Int
        public var deferred: Int
        /// Writes the store refused (availability) or that hit a node that was down.
        public var refusedWrites: Int
    }

    public var scenario: String
    public var description: String
    public var seed: UInt64
    public var transport: String
    public var steps: Int
    public var checkpoints: Int
    /// Virtual milliseconds at the end of the run.
    public var virtualTimeMs: Int64
    /// Every node went idle with the links empty (convergence itself is an invariant).
    public var converged: Bool
    public var sessions: Int
    public var sessionFailures: Int
    public var nodes: [Node]
    public var invariants: [InvariantResult]
    /// The command that replays this run.
    public var replay: String
    /// Power cuts armed by `powerCut` steps (nil when the scenario has none).
    public var powerCuts: Int?
    /// What each node purged and forgot (nil unless the scenario sets a tombstone
    /// retention or peer horizon, or has a `purge` step).
    public var tombstonePurge: [Purge]?

    /// One node's tombstone purging at the end of the run.
    public struct Purge: Sendable, Equatable, Codable {
        public var node: String
        /// Virtual ms of the newest purged tombstone's version (`purgedThrough()`), nil when none was purged.
        public var purgedThroughMs: Int64?
        /// Tombstones `purge` steps removed (purges at open and after acknowledgements are not counted).
        public var purgedByStep: Int
        /// The watches the node forgot (`forgottenPeers()`, node ids in hex), as
        /// seen at checkpoints and at the end (a watch that returned is listed too).
        public var forgottenPeers: [String]
    }

    public init(scenario: String, description: String, seed: UInt64, transport: String, steps: Int, checkpoints: Int,
                virtualTimeMs: Int64, converged: Bool, sessions: Int, sessionFailures: Int, nodes: [Node],
                invariants: [InvariantResult], replay: String, powerCuts: Int? = nil, tombstonePurge: [Purge]? = nil) {
        self.scenario = scenario
        self.description = description
        self.seed = seed
        self.transport = transport
        self.steps = steps
        self.checkpoints = checkpoints
        self.virtualTimeMs = virtualTimeMs
        self.converged = converged
        self.sessions = sessions
        self.sessionFailures = sessionFailures
        self.nodes = nodes
        self.invariants = invariants
        self.replay = replay
        self.powerCuts = powerCuts
        self.tombstonePurge = tombstonePurge
    }

    /// True when every invariant held.
    public var passed: Bool { invariants.allSatisfy(\.passed) }
    /// The names of the invariants that failed.
    public var failedInvariants: [String] { invariants.filter { !$0.passed }.map(\.name) }

    /// The report as a readable table.
    public var text: String {
        var out = "syncsim run \(scenario) — seed \(seed), transport \(transport)\n"
        out += "  \(description)\n"
        out += "  \(steps) steps, \(checkpoints) checkpoints, \(sessions) sessions (\(sessionFailures) failed), "
        out += "virtual time \(virtualTimeMs) ms, \(converged ? (nodes.count > 2 ? "settled (all idle, links empty)" : "settled (both idle, link empty)") : "DID NOT SETTLE")\n"
        if let powerCuts { out += "  \(powerCuts) power cut\(powerCuts == 1 ? "" : "s") armed\n" }
        for purge in tombstonePurge ?? [] {
            out += "  tombstone purge on \(purge.node): "
            out += purge.purgedThroughMs.map { "purged through t=\($0) ms" } ?? "nothing purged"
            out += ", \(purge.purgedByStep) by purge steps"
            out += purge.forgottenPeers.isEmpty ? "" : ", forgot \(purge.forgottenPeers.joined(separator: ", "))"
            out += "\n"
        }
        out += "\n"
        let header = ["node", "id", "entries", "tombstones", "sent", "received", "wire bytes", "payload bytes", "ratio", "frames", "dropped", "conflicts", "deferred", "refused"]
        let rows = nodes.map { n in
            [n.role, n.nodeID, "\(n.entries)", "\(n.tombstones)", "\(n.entriesSent)", "\(n.entriesReceived)", "\(n.bytesOnWire)",
             "\(n.payloadBytes)", String(format: "%.2f", n.compressionRatio), "\(n.framesSent)", "\(n.framesDropped)",
             "\(n.conflicts)", "\(n.deferred)", "\(n.refusedWrites)"]
        }
        out += SimReport.table([header] + rows)
        out += "\n"
        let width = invariants.map(\.name.count).max() ?? 0
        for result in invariants {
            let pad = String(repeating: " ", count: width - result.name.count)
            out += "  \(result.passed ? "PASS" : "FAIL")  \(result.name)\(pad)  (\(result.checks) checks)\n"
            for violation in result.violations { out += "          - \(violation)\n" }
            if result.moreViolations > 0 { out += "          - … and \(result.moreViolations) more\n" }
        }
        out += "\n"
        if passed {
            out += "all invariants hold\n"
        } else {
            out += "FAILED: \(failedInvariants.joined(separator: ", "))\n"
            out += "replay: \(replay)\n"
        }
        return out
    }

    /// The report as pretty JSON with sorted keys.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var copy = self
        for i in copy.nodes.indices { copy.nodes[i].compressionRatio = (copy.nodes[i].compressionRatio * 100).rounded() / 100 }
        let data = (try? encoder.encode(JSONForm(report: copy))) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    private struct JSONForm: Encodable {
        var report: SimReport
        enum CodingKeys: String, CodingKey { case scenario, description, seed, transport, steps, checkpoints, virtualTimeMs, converged, sessions, sessionFailures, powerCuts, tombstonePurge, nodes, invariants, passed, failed, replay }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(report.scenario, forKey: .scenario)
            try c.encode(report.description, forKey: .description)
            try c.encode(report.seed, forKey: .seed)
            try c.encode(report.transport, forKey: .transport)
            try c.encode(report.steps, forKey: .steps)
            try c.encode(report.checkpoints, forKey: .checkpoints)
            try c.encode(report.virtualTimeMs, forKey: .virtualTimeMs)
            try c.encode(report.converged, forKey: .converged)
            try c.encode(report.sessions, forKey: .sessions)
            try c.encode(report.sessionFailures, forKey: .sessionFailures)
            try c.encodeIfPresent(report.powerCuts, forKey: .powerCuts)
            try c.encodeIfPresent(report.tombstonePurge, forKey: .tombstonePurge)
            try c.encode(report.nodes, forKey: .nodes)
            try c.encode(report.invariants, forKey: .invariants)
            try c.encode(report.passed, forKey: .passed)
            try c.encode(report.failedInvariants, forKey: .failed)
            try c.encode(report.replay, forKey: .replay)
        }
    }

    static func table(_ rows: [[String]]) -> String {
        guard let first = rows.first else { return "" }
        let widths = (0..<first.count).map { col in rows.map { $0[col].count }.max() ?? 0 }
        var out = ""
        for (i, row) in rows.enumerated() {
            let cells = row.enumerated().map { col, cell in
                let pad = String(repeating: " ", count: widths[col] - cell.count)
                return col < 2 ? cell + pad : pad + cell
            }
            out += "  " + cells.joined(separator: "  ") + "\n"
            if i == 0 { out += "  " + widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n" }
        }
        return out
    }
}

extension SimReport.Node {
    /// One node's row: its store's entries and counters beside the wire figures of its end.
    static func measure(_ node: SimNode, bytesSent: Int, payloadBytesSent: Int, framesSent: Int, framesDropped: Int) throws -> SimReport.Node {
        var live = 0, tombstones = 0
        if let store = node.store {
            for info in try store.allEntryInfo() { if info.isDeleted { tombstones += 1 } else { live += 1 } }
        }
        let c = node.counters
        return SimReport.Node(
            role: node.name.rawValue, nodeID: String(node.nodeID, radix: 16), entries: live, tombstones: tombstones,
            entriesSent: c.entriesSent, entriesReceived: c.entriesReceived, bytesOnWire: bytesSent, payloadBytes: payloadBytesSent,
            compressionRatio: bytesSent > 0 ? Double(payloadBytesSent) / Double(bytesSent) : 1,
            framesSent: framesSent, framesDropped: framesDropped, conflicts: c.conflicts, deferred: c.deferred,
            refusedWrites: node.refusedWrites)
    }
}

extension SimReport.Purge {
    /// A node's purge figures, read from its store (a node that is down shows only its step count).
    static func measure(_ node: SimNode) throws -> SimReport.Purge {
        var purge = SimReport.Purge(node: node.name.rawValue, purgedThroughMs: nil, purgedByStep: node.purgedByStep, forgottenPeers: [])
        guard let store = node.store else {
            purge.forgottenPeers = node.forgottenSeen.sorted().map { String($0, radix: 16) }
            return purge
        }
        let through = try store.purgedThrough()
        if through > 0 { purge.purgedThroughMs = HLCTimestamp(packed: through, node: 0).physicalMilliseconds - RunState.wallStart }
        purge.forgottenPeers = node.forgottenSeen.union(try store.forgottenPeers()).sorted().map { String($0, radix: 16) }
        return purge
    }
}

extension SimReport {
    /// The command that replays a run.
    static func replayCommand(scenario: String, seed: UInt64, transport: String?, faults: TestingFaults) -> String {
        var replay = "syncsim run \(shellQuoted(scenario)) --seed \(seed)"
        if let transport { replay += " --transport \(transport)" }
        if faults.skipTombstones { replay += " --inject-fault skip-tombstones" }
        if faults.lastArrivalWins { replay += " --inject-fault last-arrival-wins" }
        if faults.ignoreKeyMismatch { replay += " --inject-fault ignore-key-mismatch" }
        if faults.removeRebaselinedAtOnce { replay += " --inject-fault remove-rebaselined-at-once" }
        return replay
    }

    /// `word` as one shell argument: as it is when it holds only characters no
    /// shell treats specially, else in single quotes (a `'` inside as `'\''`).
    static func shellQuoted(_ word: String) -> String {
        let plain = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,")
        if !word.isEmpty, word.allSatisfy(plain.contains) { return word }
        return "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

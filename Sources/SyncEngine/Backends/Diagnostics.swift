import Foundation
import SyncTransport

/// Counts and sizes of a store, in total and per namespace, with its cache
/// and replication counters: what to look at when something seems off.
public struct StoreDiagnostics: Sendable, Codable, Equatable {
    /// Counts over a set of entries.
    public struct Totals: Sendable, Codable, Equatable {
        /// Entries with a row, live or removed.
        public var entries = 0
        public var liveValues = 0
        /// Removals kept as tombstones so they replicate.
        public var removed = 0
        /// Serialized bytes of the live values.
        public var bytes = 0
        public var largestValue = 0
        /// Changes written here and not yet acknowledged by the peer.
        public var pending = 0
        public var encrypted = 0

        public init() {}

        mutating func add(_ info: EntryInfo, encrypted isEncrypted: Bool) {
            entries += 1
            if info.isDeleted { removed += 1 } else { liveValues += 1 }
            bytes += info.size
            largestValue = max(largestValue, info.size)
            if info.isPending { pending += 1 }
            if isEncrypted { encrypted += 1 }
        }
    }

    public var role: DeviceRole
    public var totals: Totals
    /// Per namespace: a key's full name up to its last `:` ("" for keys outside any namespace).
    public var namespaces: [String: Totals]
    public var cache: CacheStatistics
    /// Replication counters, for stores that replicate.
    public var sync: SyncCounters?

    /// The namespace part of a full key name.
    public static func namespace(of key: String) -> String {
        key.lastIndex(of: ":").map { String(key[..<$0]) } ?? ""
    }
}

extension KeyValueBackend {
    /// Counts and sizes per store and per namespace, cache statistics and sync counters.
    public func diagnostics() throws -> StoreDiagnostics {
        var totals = StoreDiagnostics.Totals()
        var namespaces: [String: StoreDiagnostics.Totals] = [:]
        for info in try allEntryInfo() {
            let encrypted = isEncrypted(info)
            totals.add(info, encrypted: encrypted)
            namespaces[StoreDiagnostics.namespace(of: info.key), default: .init()].add(info, encrypted: encrypted)
        }
        return StoreDiagnostics(role: role, totals: totals, namespaces: namespaces, cache: cacheStatistics,
                                sync: replicatingStore?.syncCounters)
    }

    /// A report a person can read: totals, cache and sync counters, then every
    /// key by namespace with its size, version and pending state. Values of
    /// encrypted keys never appear; other values appear as a short preview
    /// only when `previewValues` is true. Key names and previews (a peer may
    /// choose a family member's id and a value) show control and format
    /// characters escaped (`\n`, `\u{1b}`), as peer text is in events.
    public func debugDump(previewValues: Bool = false) throws -> String {
        let infos = try allEntryInfo()
        let d = try diagnostics()
        var out = ""
        let name = replicatingStore.map { "store at \($0.path), node \(String($0.nodeID, radix: 16))" } ?? "\(type(of: self))"
        out += "\(d.role) \(name)\n"
        out += "  \(Self.describe(d.totals))\n"
        out += "  cache: \(d.cache.hits) hits, \(d.cache.misses) misses (\(String(format: "%.1f", d.cache.hitRate * 100))% hit rate), \(d.cache.skippedWrites) identical writes skipped\n"
        if let s = d.sync {
            out += "  sync: \(s.sessions) sessions, \(s.entriesSent) entries sent, \(s.entriesReceived) received (\(s.entriesIgnored) ignored, \(s.entriesRejected) rejected), \(s.conflicts) conflicts, \(s.deferred) deferred, \(s.bytesSent) B out, \(s.bytesReceived) B in\n"
        }
        for namespace in d.namespaces.keys.sorted() {
            out += "\n[\(namespace.isEmpty ? "(no namespace)" : PeerText.escaped(namespace, maxLength: .max))] \(Self.describe(d.namespaces[namespace] ?? .init()))\n"
            for info in infos where StoreDiagnostics.namespace(of: info.key) == namespace {
                var line = "  \(PeerText.escaped(info.key, maxLength: .max))  \(info.encoding)  "
                if info.isDeleted {
                    line += "removed"
                } else {
                    line += "\(info.size) B"
                }
                line += "  v\(info.version)"
                if info.isPending { line += "  pending (\(info.lane))" }
                if isEncrypted(info) {
                    line += "  encrypted"
                } else if previewValues, !info.isDeleted, let bytes = try? encodedValue(forKey: info.key) {
                    line += "  = \(Self.preview(bytes))"
                }
                out += line + "\n"
            }
        }
        return out
    }

    private func isEncrypted(_ info: EntryInfo) -> Bool {
        info.isEncrypted || registry.descriptor(forEntry: info.key)?.security == .encrypted
    }

    /// The SQLite store underneath, when this backend replicates.
    var replicatingStore: SyncStore? {
        switch self {
        case let store as SyncStore: store
        case let files as FileValueStore: files.syncStore
        case let replacing as ReplacingStore: replacing.store.replicatingStore
        default: nil
        }
    }

    private static func describe(_ t: StoreDiagnostics.Totals) -> String {
        "\(t.entries) entries (\(t.liveValues) live, \(t.removed) removed), \(t.bytes) B, largest \(t.largestValue) B, \(t.pending) pending, \(t.encrypted) encrypted"
    }

    private static func preview(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes.prefix(48), as: UTF8.self)
        // No control or format character (C0, DEL, C1, bidirectional overrides, separators).
        let printable = text.unicodeScalars.allSatisfy { !PeerText.isInvisible($0) && $0 != "\u{FFFD}" }
        guard printable else { return "<\(bytes.count) bytes>" }
        return bytes.count > 48 ? text + "…" : text
    }
}

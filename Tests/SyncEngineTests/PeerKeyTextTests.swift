import Foundation
@testable import SyncEngine
@testable import SyncSim
@testable import SyncTransport
import Testing

/// A family member's name is the peer's to choose (any text but NUL, up to
/// 1,024 bytes): where an event or `syncsim` renders it as text it is escaped
/// and bounded, while the event's typed field keeps the key itself.
@Suite struct PeerKeyTextTests {
    /// Escape sequences, a bidirectional override and a line break that
    /// would forge a line of its own, then length.
    static let hostileID = "\u{1b}[2J\u{202E}\u{85}\u{7f}\r\nsyncsim node: forged line " + String(repeating: "x", count: 600)

    /// Whether `text` holds a scalar a terminal or a log takes as other than
    /// text (beyond the line breaks `allowingNewlines` permits).
    static func holdsInvisibles(_ text: String, allowingNewlines: Bool = false) -> Bool {
        text.unicodeScalars.contains { scalar in
            if allowingNewlines, scalar == "\n" { return false }
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator: return true
            default: return false
            }
        }
    }

    /// A conflict on a key the watch named: the phone's event carries the
    /// key as it is; its description showed it raw (a terminal cleared, a
    /// log line forged), 600 characters long. Escaped and bounded now.
    @Test func aConflictOnAPeersKeyKeepsTheKeyAndItsTextIsEscaped() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        let key = TestKeys.daily[Self.hostileID]
        let events = pair.phone.events()
        try await pair.phone.set(1, for: key)
        try await pair.watch.set(2, for: key)
        try watch.deliverQueued(through: watchBox)
        try phone.deliverQueued(through: phoneBox)
        let conflict = try await first(of: events, "the phone's conflict event") { if case .conflictResolved = $0 { true } else { false } }
        guard case .conflictResolved(let named, _, _) = conflict else { return }
        #expect(named == key.name, "the event's key is not the key")
        let text = conflict.description
        #expect(!Self.holdsInvisibles(text), "\(text.debugDescription)")
        #expect(text.contains("\\u{1b}[2J") && text.count < 400, "\(text.debugDescription)")
        #expect(!Self.holdsInvisibles(PeerEvent(peer: pair.watch.nodeID, event: conflict).description))
    }

    /// Every event that names a key renders it escaped and bounded; the typed field keeps it.
    @Test func everyEventNamingAKeyRendersItEscaped() {
        let key = "steps:day:" + Self.hostileID
        let events: [SyncEvent] = [
            .conflictResolved(key: key, winner: .remote, rule: .lastWriterWins),
            .deferred(key: key, size: 200_000),
            .chunk(key: key, index: 0, count: 3, outgoing: false),
        ]
        for event in events {
            #expect(!Self.holdsInvisibles(event.description), "\(event.description.debugDescription)")
            #expect(event.description.count < 500, "\(event.description.count)")
        }
        if case .deferred(let named, _) = events[1] { #expect(named == key) }
    }

    /// `syncsim node`'s JSON lines: the JSON encoder escaped C0 controls but
    /// wrote DEL, C1 controls (U+0085, a line break to some readers) and
    /// bidirectional overrides raw. Every such scalar is a `\u` escape now,
    /// and the line still parses to the key itself.
    @Test func aNodesJSONLineHoldsOnlyVisibleTextAndParsesToTheKey() throws {
        let folder = TempFolder()
        let path = folder.file("lines.jsonl")
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try #require(FileHandle(forWritingAtPath: path))
        let key = "steps:day:" + Self.hostileID + "\u{2028}\u{E0001}"
        JSONLineWriter(handle: handle).write(NodeConsole.json(.conflictResolved(key: key, winner: .remote, rule: .lastWriterWins)))
        try handle.close()
        let line = try String(contentsOfFile: path, encoding: .utf8)
        #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1)
        #expect(!Self.holdsInvisibles(String(line.dropLast())), "\(line.debugDescription)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["key"] as? String == key)
    }

    /// `syncsim inspect` printed a store's keys (the peer's too) raw in its
    /// tables; its JSON wrote what the JSON encoder does not escape raw.
    @Test func inspectShowsAPeersKeyEscapedAndItsJSONKeepsIt() async throws {
        let pair = try Pair()
        let key = TestKeys.daily[Self.hostileID]
        try await pair.phone.set(1, for: key)
        let inspection = try StoreInspection(path: pair.folder.file("phone.sqlite"), includeValues: true)
        #expect(!Self.holdsInvisibles(inspection.text, allowingNewlines: true), "\(inspection.text.debugDescription)")
        #expect(!inspection.text.contains("\nsyncsim node: forged line"))
        #expect(inspection.text.contains("\\u{1b}[2J"))
        let json = inspection.json
        #expect(!Self.holdsInvisibles(json, allowingNewlines: true), "\(json.debugDescription)")
        let decoded = try JSONDecoder().decode(StoreInspection.self, from: Data(json.utf8))
        #expect(decoded.entries.map(\.key).contains(key.name))
    }

    /// Key declarations a watch posted through the mailbox: the phone's
    /// `keyMismatch` event named every name only the watch declares, as it
    /// came (2,000 of them here, one with an escape sequence), where a live
    /// session's names at most 64 of them, escaped. The same now.
    @Test func aQueuedKeyMismatchNamesAtMost64OfThePeersNamesEscaped() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, _, watchBox) = try QueuedDeliveryTests().registriesThatDiffer(pair, folder)
        let events = pair.phone.events()
        let junk = (0..<2_000).map { "junk:\($0)|all|automaticSmall|json" } + ["junk:\u{1b}[2J|all|automaticSmall|json"]
        let lines = (otherWatch.registry.wireDeclarations(from: .watch) + junk).sorted()
        let header = QueuedHeader(protocolVersion: 1, node: otherWatch.nodeID, role: .watch, pairingEpoch: watchBox.pairingEpoch,
                                  registryFingerprint: KeyRegistry.fingerprint(of: lines))
        try watchBox.post(QueuedMessage.declarations(header, lines, isAnswer: false).frame())
        #expect(try phone.deliverQueued(through: phoneBox).refused.isEmpty)
        let mismatch = try await first(of: events, "the phone's keyMismatch") { if case .keyMismatch = $0 { true } else { false } }
        guard case .keyMismatch(let keys) = mismatch else { return }
        #expect(keys.contains("health:daily:steps"))
        #expect(keys.count <= 1 + 64, "\(keys.count) names")
        #expect(!keys.contains { Self.holdsInvisibles($0) })
        #expect(!Self.holdsInvisibles(mismatch.description))
    }
}

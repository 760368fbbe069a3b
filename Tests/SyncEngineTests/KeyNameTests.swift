import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// "José" with a precomposed é (NFC) and with e + U+0301 (NFD): one name to
/// Swift, two byte strings to SQLite.
private let precomposed = "Jos\u{E9}"
private let decomposed = "Jose\u{301}"
private let contacts = KeyFamily<Int>("contact", default: 0, availability: .all, policy: .automaticSmall)

private func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite(.timeLimit(.minutes(5))) struct KeyNameNormalizationTests {
    @Test func twoSpellingsOfOneNameAreOneKeyBeforeAndAfterARestart() async throws {
        #expect(precomposed == decomposed && utf8(precomposed) != utf8(decomposed))
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([contacts]))
        try await store.set(1, for: contacts[precomposed])
        try await store.set(2, for: contacts[decomposed])
        #expect(try await store.get(contacts[precomposed]) == 2)
        #expect(try store.allEntryInfo().map { utf8($0.key) } == [utf8("contact:" + precomposed)])
        // Untyped reads find it by either spelling.
        #expect(try store.entryInfo(forKey: "contact:" + decomposed) != nil)
        #expect(try store.rawValue(forKey: "contact:" + decomposed) == utf8("2"))
        store.close()

        // The last write is what the app reads after a restart (it read the first one: two rows, one found).
        let reopened = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([contacts]))
        #expect(try await reopened.get(contacts[precomposed]) == 2)
        #expect(try await reopened.get(contacts[decomposed]) == 2)
        reopened.close()
    }

    @Test func declaredNamesAndUntypedWritesAreKeptInNFC() throws {
        let cafe = Key<String>("caf" + "e\u{301}", default: "")
        #expect(utf8(cafe.name) == utf8("caf\u{E9}"))
        let fromFile = try JSONDecoder().decode(KeyDescriptor.self, from: Data(#"{"name":"caf\u0065\u0301","legacyName":"old:\u0065\u0301"}"#.utf8))
        #expect(utf8(fromFile.name) == utf8("caf\u{E9}"))
        #expect(fromFile.legacyName.map(utf8) == utf8("old:\u{E9}"))
        var member = fromFile
        member.name = "contact:" + decomposed
        #expect(utf8(member.name) == utf8("contact:" + precomposed))
        #expect(utf8(BackendWrite(key: "contact:" + decomposed, bytes: nil).key) == utf8("contact:" + precomposed))
    }

    @Test func aPeerOnEitherSpellingConvergesOnOneKey() async throws {
        let pair = try Pair(keys: [contacts])
        let link = Link(pair.phone, pair.watch)
        try await pair.phone.set(1, for: contacts[precomposed])
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.set(2, for: contacts[decomposed])
        link.connect()
        link.settle()
        for store in [pair.phone, pair.watch] {
            #expect(try store.allEntryInfo().map { utf8($0.key) } == [utf8("contact:" + precomposed)])
            #expect(try await store.get(contacts[precomposed]) == 2)
        }
    }

    /// A peer of a build before names were kept in NFC sends the name as its app spelled it.
    @Test func anEntryNamedInAnotherSpellingJoinsTheStoredKey() async throws {
        let pair = try Pair(keys: [contacts])
        let link = Link(pair.phone, pair.watch)
        link.connect()
        try await pair.phone.set(1, for: contacts[precomposed])
        link.settle()
        let later = HLCTimestamp(packed: (pair.phoneClock.nowMilliseconds() + 1_000) << 16, node: pair.watch.nodeID)
        let entry = WireEntry(key: "contact:" + decomposed, version: later, base: .zero, deleted: false, encoding: "json", value: utf8("2"))
        for frame in [SyncMessage.batch(.init(id: 77, entries: [entry])).frame(),
                      Frame(type: SyncMessage.MessageType.batch.rawValue, payload: ColumnarBatch.encode(id: 78, entries: [entry]))] {
            _ = link.a.receive(frame, now: link.now)
            #expect(link.a.failure == nil)
        }
        #expect(try pair.phone.allEntryInfo().map { utf8($0.key) } == [utf8("contact:" + precomposed)])
        #expect(try await pair.phone.get(contacts[precomposed]) == 2)
    }

    /// A store written by a build that kept names as spelled: two rows of one
    /// name become the one the merge rule keeps, and it reaches the peer.
    @Test func aStoreWithTwoSpellingsOfANameIsMovedToOneAtOpen() async throws {
        let pair = try Pair(keys: [contacts])
        let phonePath = pair.folder.file("phone.sqlite")
        try await pair.phone.set(1, for: contacts[precomposed])
        try await pair.phone.set(5, for: contacts["Zoë"])
        pair.phone.close()
        // The older write under NFC, the newer one under NFD, a third name only under NFD: what the older build left.
        try rawSQL(phonePath, "UPDATE entries SET key = 'contact:old' WHERE key = 'contact:\(precomposed)'")
        var phone = try SyncStore(path: phonePath, role: .phone, registry: try KeyRegistry([contacts]),
                                  options: StoreOptions(clock: pair.phoneClock))
        pair.phoneClock.advance(by: 1_000)
        try await phone.set(2, for: contacts[precomposed])
        phone.close()
        try rawSQL(phonePath, """
            UPDATE entries SET key = 'contact:\(decomposed)' WHERE key = 'contact:\(precomposed)';
            UPDATE entries SET key = 'contact:\(precomposed)' WHERE key = 'contact:old';
            UPDATE entries SET key = 'contact:Zoe\u{308}' WHERE key = 'contact:Zo\u{EB}';
            PRAGMA user_version = 10;
            """)

        phone = try SyncStore(path: phonePath, role: .phone, registry: try KeyRegistry([contacts]),
                              options: StoreOptions(clock: pair.phoneClock))
        #expect(try phone.allEntryInfo().map { utf8($0.key) } == [utf8("contact:" + precomposed), utf8("contact:Zo\u{EB}")])
        #expect(try await phone.get(contacts[precomposed]) == 2)
        #expect(try await phone.get(contacts["Zoe\u{308}"]) == 5)
        let link = Link(phone, pair.watch)
        link.connect()
        link.settle()
        #expect(try await pair.watch.get(contacts[precomposed]) == 2)
        #expect(try await pair.watch.get(contacts["Zoë"]) == 5)
        phone.close()
    }

    /// A member id that starts with a combining mark: ':' and the mark are one Character, so
    /// looking for ':' by Characters found no family (the write threw unknown-key) and a prefix
    /// by Characters listed no member.
    @Test func aMemberIdStartingWithACombiningMarkBelongsToItsFamily() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: try KeyRegistry([contacts]))
        let seen = Mutex<[String]>([])
        let observation = store.observeChanges(matching: .namespace("contact")) { change in seen.withLock { $0.append(change.key) } }
        let id = "\u{301}x"
        try await store.set(4, for: contacts[id])
        #expect(try await store.get(contacts[id]) == 4)
        #expect(try store.members(of: contacts).map(utf8) == [utf8(id)])
        #expect(seen.withLock { $0 }.map(utf8) == [utf8("contact:" + id)])
        observation.cancel()
        store.close()
    }

    /// With value files, a moved value's file goes under its new name (and the old one goes).
    @Test func aValueFileMovesWithItsName() async throws {
        let folder = TempFolder()
        let directory = folder.file("values")
        var store = try FileValueStore(directory: directory, role: .phone, registry: try KeyRegistry([contacts]))
        try await store.set(3, for: contacts[precomposed])
        let version = try #require(try store.syncStore.entryInfo(forKey: "contact:" + precomposed)?.version)
        store.close()
        let oldFile = ValueFiles.fileName(key: "contact:" + decomposed, version: version)
        let newFile = ValueFiles.fileName(key: "contact:" + precomposed, version: version)
        let values = directory + "/values/"
        #expect(rename(values + newFile, values + oldFile) == 0)
        try rawSQL(directory + "/metadata.sqlite", """
            UPDATE entries SET key = 'contact:\(decomposed)' WHERE key = 'contact:\(precomposed)';
            PRAGMA user_version = 10;
            """)

        store = try FileValueStore(directory: directory, role: .phone, registry: try KeyRegistry([contacts]))
        #expect(try await store.get(contacts[precomposed]) == 3)
        let files = try FileManager.default.contentsOfDirectory(atPath: values).filter { $0.hasSuffix(".value") }
        #expect(files == [newFile])
        store.close()
    }

    /// A member of a family whose name is not ASCII ("José"), named in NFD
    /// to the untyped API: `KeyRegistry.descriptor(forEntry:)` looked families
    /// up by the name's own UTF-8 bytes and found none (nil), and so an
    /// `InMemoryStore`, which passed the name on as it came, threw
    /// `unknown-key` for an uncached `encodedValue(forKey:)` where a
    /// `SyncStore` (which makes names NFC first) read it.
    @Test(arguments: BackendKind.allCases)
    func aFamilyMemberNamedInNFDIsFoundInANonASCIIFamily(_ kind: BackendKind) throws {
        let family = KeyFamily<Int>(precomposed, default: 0, policy: .never)
        let registry = try KeyRegistry([family])
        #expect(registry.descriptor(forEntry: decomposed + ":x")?.name == precomposed)
        #expect(registry.descriptor(forEntry: precomposed + ":x")?.name == precomposed)
        #expect(registry.descriptor(forEntry: decomposed + "x:y") == nil)
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [family])
        defer { store.close() }
        #expect(try store.encodedValue(forKey: decomposed + ":z") == nil)  // not cached: checked against the registry
        try store.setNow(3, for: family["x"])
        #expect(try store.encodedValue(forKey: decomposed + ":x") == utf8("3"))
        try store.setEncoded(utf8("4"), forKey: decomposed + ":y")
        #expect(try store.value(for: family["y"]) == 4)
    }
}

/// A NUL ends a C string: SQLite took "contact:a\0b" for "contact:a".
@Suite(.timeLimit(.minutes(5))) struct KeyNameNULTests {
    @Test func aNameWithANULIsRefusedAndOverwritesNothing() async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([contacts]))
        try await store.set(1, for: contacts["a"])
        await #expect { try await store.set(2, for: contacts["a\u{0}b"]) } throws: { ($0 as? SyncError)?.code == .invalidKey }
        await #expect { _ = try await store.get(contacts["a\u{0}b"]) } throws: { ($0 as? SyncError)?.code == .invalidKey }
        #expect(throws: SyncError.self) { try store.setEncoded(Array("3".utf8), forKey: "contact:a\u{0}c") }
        store.close()
        let reopened = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([contacts]))
        #expect(try await reopened.get(contacts["a"]) == 1)
        #expect(try reopened.allEntryInfo().map(\.key) == ["contact:a"])
        reopened.close()
    }

    /// An older version under "contact:a\0x" replaced the newer "contact:a" on disk (not in the cache).
    @Test func aPeersEntryNamedWithANULIsRefusedAndOverwritesNothing() async throws {
        let pair = try Pair(keys: [contacts])
        let link = Link(pair.phone, pair.watch)
        link.connect()
        pair.phoneClock.advance(by: 10_000)
        try await pair.phone.set(1, for: contacts["a"])
        let older = HLCTimestamp(packed: (pair.phoneClock.nowMilliseconds() - 5_000) << 16, node: pair.watch.nodeID)
        let entry = WireEntry(key: "contact:a\u{0}x", version: older, base: .zero, deleted: false, encoding: "json", value: utf8("9"))
        let replies = link.a.receive(SyncMessage.batch(.init(id: 77, entries: [entry])).frame(), now: link.now)
        #expect(link.a.failure == nil)
        let acks = replies.compactMap { try? SyncMessage(frame: $0) }.compactMap { if case .ack(let ack) = $0 { ack } else { nil } }
        #expect(acks.first?.rejected == [.init(key: "contact:a\u{0}x", code: "invalid-key")])
        #expect(try pair.phone.rawValue(forKey: "contact:a") == utf8("1"))
        #expect(try pair.phone.allEntryInfo().map(\.key) == ["contact:a"])
    }

    /// Text goes to SQLite and comes back whole, a NUL and all (a pairing epoch, an encoding).
    @Test func textIsBoundAndReadWhole() throws {
        let folder = TempFolder()
        let conn = try SQLiteConnection(path: folder.file("t.sqlite"))
        try conn.execute("CREATE TABLE t(x TEXT)")
        for text in ["a\u{0}b", "", "Jos\u{E9}"] {
            let insert = try conn.statement("INSERT INTO t(x) VALUES(?1)")
            insert.bind(1, text)
            try insert.run()
        }
        let select = try conn.statement("SELECT x, length(CAST(x AS BLOB)), x IS NULL FROM t ORDER BY rowid")
        var read: [String] = []
        while try select.step() {
            read.append(select.string(0))
            #expect(select.int(1) == read.last!.utf8.count && select.int(2) == 0)
        }
        select.reset()
        #expect(read.map(utf8) == [utf8("a\u{0}b"), [], utf8("Jos\u{E9}")])
    }
}

/// What a peer's decoder refuses can never be sent: a batch holding it ended every session.
@Suite(.timeLimit(.minutes(5))) struct KeyNameBoundTests {
    @Test func aNameLongerThanAPeerAcceptsIsRefusedAndTheRestSyncs() async throws {
        let pair = try Pair(keys: [contacts])
        let long = String(repeating: "x", count: 2_000)
        await #expect { try await pair.phone.set(1, for: contacts[long]) } throws: { ($0 as? SyncError)?.code == .invalidKey }
        // A key that never leaves the device has no such bound.
        let notes = KeyFamily<Int>("notes", default: 0, policy: .never)
        let local = try SyncStore(path: pair.folder.file("local.sqlite"), role: .phone, registry: try KeyRegistry([notes]))
        try await local.set(8, for: notes[long])
        #expect(try await local.get(notes[long]) == 8)
        local.close()
        // The longest accepted name crosses.
        let longest = String(repeating: "y", count: 1_024 - "contact:".utf8.count)
        try await pair.phone.set(2, for: contacts[longest])
        try await pair.phone.set(3, for: contacts["short"])
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(try await pair.watch.get(contacts["short"]) == 3)
        #expect(try await pair.watch.get(contacts[longest]) == 2)
    }

    /// A store written before names were bounded may hold a longer one: it is passed over, the rest goes.
    @Test func aStoredNameTooLongToSendDoesNotStopTheRest() async throws {
        let pair = try Pair(keys: [contacts])
        let phonePath = pair.folder.file("phone.sqlite")
        try await pair.phone.set(1, for: contacts["stretch"])
        pair.phone.close()
        try rawSQL(phonePath, "UPDATE entries SET key = 'contact:\(String(repeating: "z", count: 2_000))' WHERE key = 'contact:stretch'")
        let phone = try SyncStore(path: phonePath, role: .phone, registry: try KeyRegistry([contacts]),
                                  options: StoreOptions(clock: pair.phoneClock))
        try await phone.set(3, for: contacts["short"])
        let link = Link(phone, pair.watch)
        link.connect()
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(try await pair.watch.get(contacts["short"]) == 3)
        #expect(try pair.watch.allEntryInfo().map(\.key) == ["contact:short"])
        phone.close()
    }

    @Test func aDeclarationThatCannotCrossTheWireIsRefusedWhenTheRegistryIsBuilt() throws {
        let serializer = ValueSerializer<Int>(identifier: String(repeating: "s", count: 65), encode: { Array(String($0).utf8) },
                                             decode: { Int(String(decoding: $0, as: UTF8.self)) ?? 0 })
        #expect { _ = try KeyRegistry([Key<Int>("wide", default: 0, serializer: serializer)]) }
            throws: { ($0 as? SyncError)?.code == .invalidKey }
        let fine = ValueSerializer<Int>(identifier: String(repeating: "s", count: 64), encode: serializer.encode, decode: serializer.decode)
        _ = try KeyRegistry([Key<Int>("wide", default: 0, serializer: fine)])
        // A key that never leaves the device is not bounded by the wire.
        _ = try KeyRegistry([Key<Int>("wide", default: 0, policy: .never, serializer: serializer)])
    }

    /// A name within the limit whose NFC form is not (U+0958 is 3 bytes and
    /// 6 in NFC, a composition exclusion) was stored longer than any peer
    /// accepts. A peer sends names in NFC already; such a frame is refused,
    /// in both batch formats and in the other messages that carry names.
    @Test func aNameThatGrowsPastTheLimitInNFCIsRefused() throws {
        let grows = "contact:" + String(repeating: "\u{0958}", count: 300)
        try #require(grows.utf8.count <= KeyName.maxBytes && KeyName.canonical(grows).utf8.count > KeyName.maxBytes)
        let version = HLCTimestamp(packed: 1 << 30, node: 7)
        let entry = WireEntry(key: grows, version: version, base: .zero, deleted: false, encoding: "json", value: Array("1".utf8))
        let messages: [SyncMessage] = [
            .batch(.init(id: 1, entries: [entry])),
            .chunkAck(.init(key: grows, version: version, index: 0, complete: false)),
        ]
        for message in messages {
            for protocolVersion: UInt16 in [1, 2] {
                #expect { _ = try SyncMessage(frame: message.frame(protocolVersion: protocolVersion)) }
                    throws: { ($0 as? SyncError)?.code == .malformedMessage }
            }
        }
        // Within the limit in NFC, it decodes, in NFC.
        let fits = "contact:" + String(repeating: "\u{0958}", count: 100)
        let decoded = try SyncMessage(frame: SyncMessage.batch(.init(id: 1, entries: [WireEntry(key: fits, version: version, base: .zero, deleted: false,
                                                                                                  encoding: "json", value: [])])).frame(protocolVersion: 2))
        guard case .batch(let batch) = decoded else { Issue.record("not a batch"); return }
        #expect(batch.entries.map { Array($0.key.utf8) } == [Array(KeyName.canonical(fits).utf8)])
    }
}

/// `legacyName` was never checked: NUL, whitespace, the key's own name or
/// another key's legacy name were taken, and the migration then read the wrong value or none.
@Suite struct LegacyNameValidationTests {
    private func refused(_ descriptors: [KeyDescriptor], _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(sourceLocation: sourceLocation) { _ = try KeyRegistry(descriptors: descriptors) } throws: { error in
            guard let error = error as? SyncError, error.code == .invalidKey else { return false }
            return error.message.contains("legacy") && error.message.contains(expected)
        }
    }

    @Test func aLegacyNameIsCheckedAsAKeyName() throws {
        for bad in ["old\u{0}name", "old name", "old\tname", "", "old::name", ":old", String(repeating: "x", count: 300)] {
            refused([KeyDescriptor(name: "steps", legacyName: bad)], "steps")
        }
        _ = try KeyRegistry(descriptors: [KeyDescriptor(name: "steps", legacyName: "old:steps")])
    }

    @Test func aLegacyNameMayNotBeItsKeysNameOrAnotherLegacyName() throws {
        refused([KeyDescriptor(name: "steps", legacyName: "steps")], "its own name")
        refused([KeyDescriptor(name: "a", legacyName: "old"), KeyDescriptor(name: "b", legacyName: "old")], "old")
        // Typed keys too.
        let steps = Key<Int>("steps", default: 0, legacyName: "steps")
        #expect { _ = try KeyRegistry([steps]) } throws: { ($0 as? SyncError)?.code == .invalidKey }
        // The old key may stay declared beside the new one (BackendConformanceTests.legacyKeyMovesOnFirstRead).
        let moved = Key<Int>("steps", default: 0, legacyName: "count")
        let count = Key<Int>("count", default: 0)
        _ = try KeyRegistry([moved, count])
        _ = try KeyRegistry(descriptors: [KeyDescriptor(name: "day", isFamily: true), KeyDescriptor(name: "steps", legacyName: "day:1")])
    }

    /// A family with a legacy name was accepted: every member read (from a
    /// keys file, where a family may name one) moved the one old value, so
    /// the first member read took it and the others lost it.
    @Test func aFamilyMayNotHaveALegacyName() throws {
        refused([KeyDescriptor(name: "day", isFamily: true, legacyName: "old:day")], "'day'")
        var family = KeyDescriptor(name: "day", isFamily: true)
        family.legacyName = "old"
        refused([KeyDescriptor(name: "steps"), family], "'old'")
    }

    /// A keys file's bad `legacyName` is refused on load, naming the key.
    @Test func aKeysFilesLegacyNameIsChecked() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"a","legacyName":"b c"}]}"#.utf8).write(to: URL(fileURLWithPath: path))
        #expect { _ = try KeyRegistry.load(jsonFile: path) } throws: { ($0 as? SyncError)?.code == .invalidKey && "\($0)".contains("'a'") }
    }
}

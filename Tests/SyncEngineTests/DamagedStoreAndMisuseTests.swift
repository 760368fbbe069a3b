import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Synchronization
import Testing

/// What an app can do wrong, and what a damaged file can hold: a clear
/// error, nothing else lost, no trap.
@Suite struct DamagedStoreAndMisuseTests {
    /// The header's schema number damaged: -1 indexed the migrations (a trap
    /// opening the store); 0 in a store made them run again (`table entries already exists`).
    @Test(arguments: [-1, 0])
    func aDamagedSchemaNumberIsADamagedStore(userVersion: Int) async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry([TestKeys.steps])
        let path = folder.file("s.sqlite")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry)
            try await store.set(5, for: TestKeys.steps)
            store.close()
        }
        try rawSQL(path, "PRAGMA user_version = \(userVersion)")
        #expect { _ = try SyncStore(path: path, role: .phone, registry: registry) } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
    }

    /// A will-commit hook that used the store trapped on the writer's lock
    /// ("Recursive call to lock Mutex"). The use is refused; the write fails
    /// with that error, the store goes on.
    @Test func aWillCommitHookThatUsesTheStoreIsRefused() async throws {
        let folder = TempFolder()
        var options = StoreOptions()
        options.readerConnections = 0  // reads on the writer too
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.steps, TestKeys.blob]),
                                  options: options)
        let misuse = Atomic<Int>(0)
        store.addWillCommitHook { _ in
            switch misuse.load(ordering: .relaxed) {
            case 1: _ = try store.knownPeers()
            case 2: try store.setNow(Data([1]), for: TestKeys.blob)
            case 3: _ = try store.value(for: TestKeys.steps)
            default: break
            }
        }
        for kind in 1...3 {
            misuse.store(kind, ordering: .relaxed)
            #expect { try store.setNow(kind, for: TestKeys.steps) } throws: {
                ($0 as? SyncError)?.code == .invalidConfiguration && "\($0)".contains("inside one of its own write transactions")
            }
        }
        misuse.store(0, ordering: .relaxed)
        try store.setNow(9, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 9)
        #expect(try store.value(for: TestKeys.blob) == Data())
        store.close()
    }

    /// One encrypted value damaged on disk: writing its key threw
    /// `decryption-failed` (no way to repair it), and a session failed on it,
    /// so no other change reached the watch.
    @Test func aDamagedEncryptedValueStopsNeitherItsKeyNorTheRest() async throws {
        var pair = try Pair()
        try pair.phone.setNow("sealed", for: TestKeys.secret)
        try pair.phone.setNow(1, for: TestKeys.steps)
        pair.phone.close()
        let phonePath = pair.folder.file("phone.sqlite")
        try rawSQL(phonePath, "UPDATE entries SET value = zeroblob(40) WHERE key = 'secret'")
        pair.phone = try SyncStore(path: phonePath, role: .phone, registry: try KeyRegistry(TestKeys.all),
                                   options: StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key"))))
        #expect { _ = try pair.phone.value(for: TestKeys.secret) } throws: {
            ($0 as? SyncError)?.code == .decryptionFailed && "\($0)".contains("'secret'")
        }
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(try pair.watch.value(for: TestKeys.steps) == 1, "the other key still goes")
        #expect(try pair.watch.value(for: TestKeys.secret) == "", "the damaged one is not sent")

        try pair.phone.setNow("new", for: TestKeys.secret)
        #expect(try pair.phone.value(for: TestKeys.secret) == "new")
        try pair.phone.setNow(2, for: TestKeys.steps)
        link.settle()
        #expect(try pair.watch.value(for: TestKeys.secret) == "new")
        #expect(try pair.watch.value(for: TestKeys.steps) == 2)
    }

    /// A store dropped without `close()`: its change streams never ended.
    @Test func aStoreDroppedWithoutClosingEndsItsStreams() async throws {
        let folder = TempFolder()
        var store: SyncStore? = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.steps]))
        let changes = try #require(store).changes()
        let events = try #require(store).events()
        store = nil
        // Before, neither stream ever ended: the deadline fails the test instead of hanging it.
        try await withDeadline("the dropped store's streams to end") {
            for await _ in changes {}
            for await _ in events {}
        }
    }

    /// The `node_id` row lost from a store with encrypted values: the open
    /// took it for a new store and wrote a new salt (and the role asked for)
    /// over the store's, committed, then refused the key as wrong. The original
    /// key never opened the store again. The store keeps its salt and role and
    /// takes a new node id.
    @Test func aLostNodeIDKeepsTheStoresSaltAndRole() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("s.key")))
        let registry = try KeyRegistry([TestKeys.steps, TestKeys.secret])
        do {
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
            try await store.set("sealed", for: TestKeys.secret)
            try await store.set(3, for: TestKeys.steps)
            store.close()
        }
        try rawSQL(path, "DELETE FROM sync_meta WHERE name = 'node_id'")
        #expect { _ = try SyncStore(path: path, role: .phone, registry: registry, options: options) } throws: {
            ($0 as? SyncError)?.code == .invalidConfiguration && "\($0)".contains("belongs to a watch")
        }
        let store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        #expect(store.nodeID != 0)
        #expect(try store.value(for: TestKeys.secret) == "sealed")
        #expect(try store.value(for: TestKeys.steps) == 3)
        store.close()
    }

    /// A damaged `node_id` row (not a number, 0, or the id the mailbox keeps
    /// for a peer not known yet): the store took node 0, which is no node's,
    /// and its phone's changes never reached the watch again, with no error.
    /// The store takes a new node id, as for a lost row, and keeps it.
    @Test(arguments: ["abc", "0", "-1", "4294967295"])
    func aDamagedNodeIDIsReplaced(value: String) async throws {
        var pair = try Pair()
        try pair.phone.setNow(1, for: TestKeys.steps)
        do {
            let link = Link(pair.phone, pair.watch)
            link.connect()
            link.settle()
        }
        let path = pair.folder.file("watch.sqlite")
        let options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
        pair.watch.close()
        try rawSQL(path, "UPDATE sync_meta SET value = '\(value)' WHERE name = 'node_id'")
        pair.watch = try SyncStore(path: path, role: .watch, registry: try TestKeys.registry(), options: options)
        let node = pair.watch.nodeID
        #expect(node != 0 && node != UInt32.max)
        try pair.watch.setNow(5, for: TestKeys.daily["w"])
        try pair.phone.setNow(2, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(try pair.watch.value(for: TestKeys.steps) == 2, "the phone's change reaches the watch")
        #expect(try pair.phone.value(for: TestKeys.daily["w"]) == 5)
        pair.watch.close()
        let reopened = try SyncStore(path: path, role: .watch, registry: try TestKeys.registry(), options: options)
        #expect(reopened.nodeID == node)
        reopened.close()
    }

    /// The salt row of a store with encrypted values lost or damaged: the
    /// open said the master key was wrong and to supply the original one,
    /// which could never open it (the key is derived over the salt). It is a
    /// damaged store, and the error says what is damaged.
    @Test(arguments: ["DELETE FROM sync_meta WHERE name = 'salt'", "UPDATE sync_meta SET value = '!' WHERE name = 'salt'"])
    func aLostSaltIsADamagedStoreNotAWrongKey(damage: String) async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("s.key")))
        let registry = try KeyRegistry([TestKeys.steps, TestKeys.secret])
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try await store.set("sealed", for: TestKeys.secret)
            store.close()
        }
        try rawSQL(path, damage)
        #expect { _ = try SyncStore(path: path, role: .phone, registry: registry, options: options) } throws: {
            ($0 as? SyncError)?.code == .databaseCorrupt && "\($0)".contains("salt")
        }
    }

    /// The purge marks of a damaged file, one of them at the start of Int64,
    /// with more marks than a store keeps: thinning them subtracted the times
    /// of neighbouring marks, which overflowed, and every open trapped (it
    /// purges tombstones). The gap is measured without overflow.
    @Test func purgeMarksAtAnExtremeTimeAreThinnedWithoutATrap() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let clock = ManualClock()
        let registry = try KeyRegistry([TestKeys.steps])
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(clock: clock))
            try await store.set(1, for: TestKeys.steps)
            store.close()
        }
        let now = clock.nowMilliseconds()
        let marks = ["\(Int64.min):"] + (1...PurgeMark.maxPurgeMarks).reversed().map { "\(now - Int64($0) * 1000):" }
        try rawSQL(path, "INSERT OR REPLACE INTO sync_meta(name, value) VALUES ('purge_marks', '\(marks.joined(separator: ";"))')")
        let store = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(clock: clock))
        #expect(try store.value(for: TestKeys.steps) == 1)
        #expect(PurgeMark.list(try store.meta("purge_marks")).count <= PurgeMark.maxPurgeMarks)
        store.close()
    }

    /// A commit log row claiming a change sequence at the end of Int64 (a
    /// damaged row another connection wrote): the store's look at it trapped
    /// on the next sequence (`seqHigh + 1`). It is read as a damaged row.
    @Test func aCommitLogRowWithASequenceAtTheEndOfInt64IsADamagedRow() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        let store = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([TestKeys.steps]), options: options)
        try await store.set(1, for: TestKeys.steps)
        for high in [Int64.max, Int64.max - 1] {
            let hex = CommitLogRecord(sequenceHigh: high, clockLatest: 0, changes: []).encoded().map { String(format: "%02x", $0) }.joined()
            try rawSQL(path, "INSERT INTO sync_commit_log(changes, format) VALUES (x'\(hex)', \(CommitLogRecord.currentFormat))")
            try store.checkForExternalChanges()
            try await store.set(Int(high % 1000), for: TestKeys.steps)
            let info = try #require(try store.entryInfo(forKey: TestKeys.steps.name))
            #expect(info.changeSequence > 0 && info.changeSequence <= SyncStore.maxSequence)
        }
        #expect(try store.value(for: TestKeys.steps) == Int((Int64.max - 1) % 1000))
        // An unreadable row sends the store to the file's own numbers: a change sequence there at the end of Int64 too.
        try rawSQL(path, "UPDATE entries SET change_seq = 9223372036854775807; INSERT INTO sync_commit_log(changes, format) VALUES (x'ff', 2)")
        try store.checkForExternalChanges()
        try await store.set(7, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 7)
        store.close()
    }

    /// A commit log row numbered at the end of Int64 (a damaged file) made
    /// SQLite number the next rows at random, below where the other
    /// processes on the file look from: they never saw those commits, and
    /// their caches kept the old values. The open removes such a row.
    @Test func aCommitLogRowNumberedPastAnyLogIsRemovedAtOpen() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        let registry = try KeyRegistry([TestKeys.steps])
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try await store.set(1, for: TestKeys.steps)
            store.close()
        }
        let hex = CommitLogRecord(sequenceHigh: 1, clockLatest: 0, changes: []).encoded().map { String(format: "%02x", $0) }.joined()
        try rawSQL(path, "INSERT INTO sync_commit_log(id, changes, format) VALUES (9223372036854775807, x'\(hex)', \(CommitLogRecord.currentFormat))")
        // Two stores on the file, as two processes would have it.
        let writer = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        let reader = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        defer {
            writer.close()
            reader.close()
        }
        #expect(try reader.value(for: TestKeys.steps) == 1)
        for value in 2...4 {
            try await writer.set(value, for: TestKeys.steps)
            try reader.checkForExternalChanges()
            #expect(try reader.value(for: TestKeys.steps) == value)
        }
    }

    /// A queued round on a closed store read a message and posted another before it failed.
    @Test func aQueuedRoundOnAClosedStoreThrowsClosed() throws {
        let pair = try Pair()
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let peer = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let mailbox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        pair.phone.close()
        #expect { try peer.deliverQueued(through: mailbox) } throws: { ($0 as? SyncError)?.code == .closed }
        #expect(try mailbox.outgoingCount() == 0)
    }
}

/// The master key file is made whole or not at all.
@Suite struct KeyFileCreationTests {
    /// A crash while the key file was written left it partial (created, then
    /// written); every later open refused it ("holds 0 bytes, not 32"). It is
    /// written to a temporary file and linked into place now: what a crash
    /// leaves is that temporary file, which no open reads.
    @Test func aNewKeyFileIsWholeAndLeavesNothingElse() async throws {
        let folder = TempFolder()
        let keyPath = folder.file("s.key")
        // What a crash of the new code leaves behind: a partial temporary file.
        #expect(FileManager.default.createFile(atPath: keyPath + ".tmp-1", contents: Data()))
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.secret]),
                                  options: StoreOptions(encryption: .keyFile(path: keyPath)))
        try await store.set("sealed", for: TestKeys.secret)
        store.close()
        let attributes = try FileManager.default.attributesOfItem(atPath: keyPath)
        #expect(attributes[.size] as? Int == 32)
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("s.key.tmp-") } == ["s.key.tmp-1"])
        let reopened = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([TestKeys.secret]),
                                     options: StoreOptions(encryption: .keyFile(path: keyPath)))
        #expect(try reopened.value(for: TestKeys.secret) == "sealed")
        reopened.close()
        // Two providers racing for one path: one key, the first stored.
        let racing = folder.file("race.key")
        let first = try KeyFileMasterKeyProvider(path: racing).storeMasterKey(Array(repeating: 1, count: 32))
        let second = try KeyFileMasterKeyProvider(path: racing).storeMasterKey(Array(repeating: 2, count: 32))
        #expect(first == Array(repeating: 1, count: 32) && second == first)
    }
}

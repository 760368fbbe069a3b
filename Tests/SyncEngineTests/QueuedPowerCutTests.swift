import Foundation
@_spi(Testing) @testable import SyncEngine
import SyncTransport
import Testing

/// What a watch takes from its mailbox is on stable storage before the
/// message is gone from it: a power cut right after a round loses nothing
/// the round took (on a SQLite VFS that drops every write not yet synced).
@Suite(.serialized, .timeLimit(.minutes(5))) struct QueuedPowerCutTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-crash-queued")

    /// The store file at `path` (watch 0's of `home`, moved there), opened as the watch's app does.
    private func openWatch(at path: String, _ home: Neighbourhood, vfs: CrashVFS?) throws -> SyncStore {
        var options = StoreOptions(clock: home.clock, encryption: .keyFile(path: home.folder.file("watch0.key")))
        options.externalChangePollInterval = nil
        options.vfsName = vfs?.name
        return try SyncStore(path: path, role: .watch, registry: home.registry, options: options)
    }

    /// A forgotten watch returning through the mailbox removes the value whose
    /// delete the phone purged when the phone's caught-up marker comes. The
    /// removal was committed without a sync and the marker taken from the
    /// mailbox: a power cut then brought the value back, and with the marker
    /// gone nothing removed it again (the watch kept a value the phone deleted).
    @Test func theRemovalACaughtUpMarkerMakesSurvivesAPowerCut() async throws {
        let vfs = Self.vfs
        vfs.disarm()
        vfs.powerOn()
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        // The watch's app starts again, its file wholly on disk, and from now on through the crash VFS.
        // Moved to a file of its own: `home` holds its store (closed) and that store's connections until it goes.
        home.watches[0].close()
        try checkpointAndTruncateWAL(of: home.folder.file("watch0.sqlite"))
        let watchFolder = TempFolder()
        let path = watchFolder.file("watch.sqlite")
        try FileManager.default.copyItem(atPath: home.folder.file("watch0.sqlite"), toPath: path)
        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phone = SyncPeer(store: home.phone, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        try phone.deliverQueued(through: phoneBox)
        // The marker announced, the notice, the baseline, the marker: all of it read in one round.
        let last = try #require(try phoneBox.outgoingMessages().last)
        #expect(try QueuedMessage(frame: last.frame) == .caughtUp(try QueuedMessage(frame: last.frame).header))
        do {
            let store = try openWatch(at: path, home, vfs: vfs)
            defer { store.close() }
            // The round a `SyncPeer` runs, without the peer (whose tasks would hold the store past the cut).
            let round = MailboxReplicator(port: SQLiteReplicationPort(store), reporter: StoreReporter(store), configuration: config, mailbox: watchBox)
                .exchange(sendsPending: true)
            #expect(round.failure == nil)
            #expect(try watchBox.incomingCount() == 0)
            #expect(try store.storedValue(for: TestKeys.steps) == nil)
            vfs.powerCut()
        }
        vfs.powerOn()
        let store = try openWatch(at: path, home, vfs: nil)
        defer { store.close() }
        let watch = SyncPeer(store: store, configuration: config)
        for _ in 0..<3 {
            try watch.deliverQueued(through: watchBox)
            try phone.deliverQueued(through: phoneBox)
        }
        #expect(try store.storedValue(for: TestKeys.steps) == nil, "the value whose delete the phone purged came back on the watch")
        #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(try store.rebaselineMarkCount() == 0)
    }

    /// The phone moves its cursor for the watch when it reads the watch's
    /// acknowledgement. The move was committed without a sync and the
    /// acknowledgement taken from the mailbox: a power cut then took the move
    /// back, and the phone posted the batch the watch had already applied again.
    @Test func thePhonesCursorMovedByAQueuedAcknowledgementSurvivesAPowerCut() throws {
        let vfs = Self.vfs
        vfs.disarm()
        vfs.powerOn()
        let folder = TempFolder()
        let registry = try KeyRegistry(TestKeys.all)
        let pairing = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phonePath = folder.file("phone.sqlite")
        func options(_ device: String, vfs: CrashVFS? = nil) -> StoreOptions {
            var options = powerCutOptions(vfs: vfs)
            options.encryption = .keyFile(path: folder.file("\(device).key"))
            return options
        }
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: options("watch"))
        defer { watch.close() }
        let phoneBox = try Mailbox(directory: folder.file("mailbox"), role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.file("mailbox"), role: .watch, secret: pairing)
        let watchRounds = MailboxReplicator(port: SQLiteReplicationPort(watch), reporter: StoreReporter(watch), configuration: config, mailbox: watchBox)
        do {
            let phone = try SyncStore(path: phonePath, role: .phone, registry: registry, options: options("phone", vfs: vfs))
            defer { phone.close() }
            try phone.setNow(7, for: TestKeys.steps)
            try phone.syncCommitted()
            let rounds = MailboxReplicator(port: SQLiteReplicationPort(phone), reporter: StoreReporter(phone), configuration: config, mailbox: phoneBox)
            #expect(rounds.exchange(sendsPending: true).entriesPosted == 1)
            #expect(watchRounds.exchange(sendsPending: true).entriesApplied == 1)
            let read = rounds.exchange(sendsPending: true)
            #expect(read.failure == nil)
            #expect(read.acknowledged)
            #expect(read.messagesPosted == 0)
            #expect(try phoneBox.incomingCount() == 0)
            vfs.powerCut()
        }
        vfs.powerOn()
        let phone = try SyncStore(path: phonePath, role: .phone, registry: registry, options: options("phone"))
        defer { phone.close() }
        let rounds = MailboxReplicator(port: SQLiteReplicationPort(phone), reporter: StoreReporter(phone), configuration: config, mailbox: phoneBox)
        let after = rounds.exchange(sendsPending: true)
        #expect(after.failure == nil)
        #expect(after.messagesPosted == 0, "the batch the watch acknowledged was posted again")
        #expect(try watch.storedValue(for: TestKeys.steps) == 7)
    }

    /// The phone compares the key declarations a watch of another registry
    /// queued (refusing the phone's batch). The comparison (the two registries,
    /// the keys declared differently) was committed without a sync and the
    /// declarations taken from the mailbox: after a power cut the phone no
    /// longer knew them, so it posted keys the watch refuses again (a refusal and
    /// a minute's pause).
    @Test func aQueuedComparisonOfKeyDeclarationsSurvivesAPowerCut() throws {
        let vfs = Self.vfs
        vfs.disarm()
        vfs.powerOn()
        let folder = TempFolder()
        let pairing = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        func options(_ device: String, vfs: CrashVFS? = nil) -> StoreOptions {
            var options = powerCutOptions(vfs: vfs)
            options.encryption = .keyFile(path: folder.file("\(device).key"))
            return options
        }
        let otherSteps = Key<Int>("steps", in: Namespace("health").child("daily"), default: 0, availability: .all, policy: .manual)
        let watchKeys: [any KeyDeclaration] = [otherSteps, TestKeys.name, TestKeys.token, TestKeys.watchFace, TestKeys.units, TestKeys.draft,
                                               TestKeys.blob, TestKeys.tags, TestKeys.secret, TestKeys.daily]
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: KeyRegistry(watchKeys), options: options("watch"))
        defer { watch.close() }
        let phonePath = folder.file("phone.sqlite")
        let registry = try KeyRegistry(TestKeys.all)
        let phoneBox = try Mailbox(directory: folder.file("mailbox"), role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.file("mailbox"), role: .watch, secret: pairing)
        let watchRounds = MailboxReplicator(port: SQLiteReplicationPort(watch), reporter: StoreReporter(watch), configuration: config, mailbox: watchBox)
        do {
            let phone = try SyncStore(path: phonePath, role: .phone, registry: registry, options: options("phone", vfs: vfs))
            defer { phone.close() }
            try phone.setNow(4, for: TestKeys.steps)
            try phone.setNow("imperial", for: TestKeys.units)
            try phone.syncCommitted()
            let rounds = MailboxReplicator(port: SQLiteReplicationPort(phone), reporter: StoreReporter(phone), configuration: config, mailbox: phoneBox)
            #expect(rounds.exchange(sendsPending: true).entriesPosted == 2)
            #expect(watchRounds.exchange(sendsPending: true).refused.map(\.code) == [.keyDeclarationMismatch])
            let read = rounds.exchange(sendsPending: true)
            #expect(read.failure == nil)
            #expect(try phoneBox.incomingCount() == 0)
            let record = try #require(try phone.peerRecords().first { $0.node == watch.nodeID })
            #expect(record.mismatched == ["health:daily:steps"])
            vfs.powerCut()
        }
        vfs.powerOn()
        let phone = try SyncStore(path: phonePath, role: .phone, registry: registry, options: options("phone"))
        defer { phone.close() }
        let record = try #require(try phone.peerRecords().first { $0.node == watch.nodeID }, "the comparison was lost to the power cut")
        #expect(record.mismatched == ["health:daily:steps"])
        #expect(record.registries != nil)
    }
}

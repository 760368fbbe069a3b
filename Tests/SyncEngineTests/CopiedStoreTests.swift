import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A second watch set up from a copy of another watch's store file (a backup
/// restored while the first is still paired) has the first's node id. A
/// phone never sends a change back to the node it came from, so before
/// protocol 6 each of the two watches missed the other's changes. Now the
/// phone refuses the second (`node-id-conflict`), which takes a new node id.
@Suite(.timeLimit(.minutes(5))) struct CopiedStoreTests {
    /// Watch A's store copied (closed, its files copied, reopened) into a
    /// store for watch B, with its key file; A reopened.
    static func copyWatch(_ pair: inout Pair) throws -> SyncStore {
        let registry = pair.watch.registry
        pair.watch.close()
        let files = FileManager.default
        for suffix in ["", "-wal"] where files.fileExists(atPath: pair.folder.file("watch.sqlite") + suffix) {
            try files.copyItem(atPath: pair.folder.file("watch.sqlite") + suffix, toPath: pair.folder.file("watch-b.sqlite") + suffix)
        }
        try files.copyItem(atPath: pair.folder.file("watch.key"), toPath: pair.folder.file("watch-b.key"))
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: registry,
                                   options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key"))))
        return try SyncStore(path: pair.folder.file("watch-b.sqlite"), role: .watch, registry: registry,
                             options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch-b.key"))))
    }

    /// One session between the phone and `watch` under `epoch`, run until quiet.
    @discardableResult
    static func session(_ phone: SyncStore, _ watch: SyncStore, epoch: String,
                        protocolRange: ClosedRange<UInt16> = 1...SyncMessage.highestProtocolVersion) -> Link {
        let link = Link(phone, watch, epoch: epoch, protocolRange: protocolRange)
        link.connect()
        return link
    }

    static func refusals(in link: Link) -> [String] {
        link.frames.compactMap { frame -> String? in
            guard case .error(let error)? = try? SyncMessage(frame: frame.frame) else { return nil }
            return error.code
        }
    }

    @Test func aWatchFromACopiedStoreTakesANewNodeIDAndTheTwoWatchesGetEachOthersChanges() async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        #expect(try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1)

        let watchB = try Self.copyWatch(&pair)
        defer { watchB.close() }
        let copiedNode = watchB.nodeID
        #expect(copiedNode == pair.watch.nodeID)
        try await pair.watch.set(2, for: TestKeys.daily["a2"])
        try await watchB.set(3, for: TestKeys.daily["b"])

        // The phone met this node id through pairing A: the watch of pairing B is refused, and takes a new one.
        let refused = Self.session(pair.phone, watchB, epoch: "pairing B")
        #expect(Self.refusals(in: refused) == [SyncError.Code.nodeIDConflict.rawValue])
        #expect(watchB.nodeID != copiedNode)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["b"]) == nil)

        // Its next session syncs, and each watch gets the other's changes through the phone.
        Self.session(pair.phone, watchB, epoch: "pairing B")
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        Self.session(pair.phone, watchB, epoch: "pairing B")
        for store in [pair.phone, pair.watch, watchB] {
            #expect(try store.storedValue(for: TestKeys.daily["a"]) == 1)
            #expect(try store.storedValue(for: TestKeys.daily["a2"]) == 2)
            #expect(try store.storedValue(for: TestKeys.daily["b"]) == 3)
        }
        // Watch A kept its node id, and its sessions were never refused.
        #expect(pair.watch.nodeID == copiedNode)
        #expect(Self.refusals(in: Self.session(pair.phone, pair.watch, epoch: "pairing A")).isEmpty)

        // The new node id is in the file: the watch reopened names it, and versions it writes carry it.
        let renewed = watchB.nodeID
        let reopened = try SyncStore(path: watchB.path, role: .watch, registry: watchB.registry,
                                     options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch-b.key"))))
        defer { reopened.close() }
        #expect(reopened.nodeID == renewed)
    }

    /// The copy was made before the phone deleted a value the first watch
    /// wrote; the delete reached the first watch, and its tombstone was
    /// purged a retention later. The copy, with its new node id, is
    /// re-baselined: the phone's notice has it drop what the phone knew (the
    /// first watch's writes the phone had acknowledged when the copy was
    /// made), so the value does not come back. (Before, the copy's first
    /// session, of another pairing, set its cursor for the phone to 0: that
    /// value counted as never sent, and went to the phone again.)
    @Test func aCopyOlderThanAPurgedDeleteDoesNotBringTheValueBack() async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["old"])
        try await pair.watch.set(5, for: TestKeys.steps)
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        let watchB = try Self.copyWatch(&pair)
        defer { watchB.close() }
        try await pair.phone.remove(TestKeys.daily["old"])
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        #expect(try pair.watch.storedValue(for: TestKeys.daily["old"]) == nil)
        #expect(try pair.phone.purgeTombstones() == 0)  // records that watch A acknowledged the delete
        for clock in [pair.phoneClock, pair.watchClock] { clock.advance(by: 31 * 24 * 3600 * 1000) }
        #expect(try pair.phone.purgeTombstones() == 1)

        Self.session(pair.phone, watchB, epoch: "pairing B")
        Self.session(pair.phone, watchB, epoch: "pairing B")
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        for store in [pair.phone, pair.watch, watchB] {
            #expect(try store.storedValue(for: TestKeys.daily["old"]) == nil, "the deleted value came back on \(store.path)")
            #expect(try store.storedValue(for: TestKeys.steps) == 5)
        }
    }

    /// An app that pairs the same watch again (a new secret) and forgets the
    /// old pairing's watches first: the watch keeps its node id, is not
    /// refused, and is baselined as a forgotten watch is.
    @Test func forgettingAPairingLetsItsWatchComeBackThroughANewOne() async throws {
        let pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: "old pairing")
        let node = pair.watch.nodeID
        #expect(try pair.phone.knownPeers(ofPairing: "old pairing") == [node])
        #expect(try pair.phone.knownPeers(ofPairing: "new pairing").isEmpty)
        try pair.phone.noteQueuedPeerRenewsNodeID(in: "old pairing")  // its watch's node renewal notice came
        #expect(try pair.phone.forgetPeers(ofPairing: "old pairing") == [node])
        #expect(try pair.phone.knownPeers().isEmpty)
        #expect(try !pair.phone.queuedPeerRenewsNodeID(in: "old pairing"), "what the pairing's watch said goes with it")

        try await pair.phone.set(9, for: TestKeys.steps)
        #expect(Self.refusals(in: Self.session(pair.phone, pair.watch, epoch: "new pairing")).isEmpty)
        #expect(pair.watch.nodeID == node)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 9)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1)
        #expect(try pair.phone.knownPeers(ofPairing: "new pairing") == [node])
        #expect(throws: SyncError.self) { try pair.watch.forgetPeers(ofPairing: "new pairing") }
    }

    /// A watch restored from an older backup of its own store (the same
    /// pairing, the same node id) lacks what it received and wrote since;
    /// its phone's cursor says it has it, and the phone never sends a watch
    /// its own writes. Taking a new node id at the restore (README) makes it
    /// a new watch to the phone, which baselines it: everything comes back,
    /// its own later writes too, and its own changes still reach the phone.
    @Test func aWatchRestoredFromItsOwnOlderBackupGetsEverythingBackWithANewNodeID() async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["before"])
        Self.session(pair.phone, pair.watch, epoch: "pairing")
        let backup = try Self.copyWatch(&pair)
        backup.close()
        try await pair.phone.set(2, for: TestKeys.daily["phone-after"])
        try await pair.watch.set(3, for: TestKeys.daily["watch-after"])
        Self.session(pair.phone, pair.watch, epoch: "pairing")
        #expect(try pair.phone.storedValue(for: TestKeys.daily["watch-after"]) == 3)

        // The watch is erased and restored from the backup; the app knows (README) and renews.
        pair.watch.close()
        let restored = try SyncStore(path: pair.folder.file("watch-b.sqlite"), role: .watch, registry: pair.phone.registry,
                                     options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch-b.key"))))
        defer { restored.close() }
        #expect(try restored.storedValue(for: TestKeys.daily["watch-after"]) == nil)
        try restored.renewNodeID()
        try await restored.set(4, for: TestKeys.daily["restored"])
        Self.session(pair.phone, restored, epoch: "pairing")
        for store in [pair.phone, restored] {
            for (id, value) in [("before", 1), ("phone-after", 2), ("watch-after", 3), ("restored", 4)] {
                #expect(try store.storedValue(for: TestKeys.daily[id]) == value, "\(id) on the \(store.role)")
            }
        }
    }

    /// The same for a phone restored from an older backup of its own store:
    /// with a new node id its watch meets it as a new phone and sends it
    /// everything it holds (what the phone wrote since the backup too), and
    /// the phone sends the watch what it holds.
    @Test func aPhoneRestoredFromItsOwnOlderBackupGetsEverythingBackWithANewNodeID() async throws {
        var pair = try Pair()
        try await pair.phone.set(1, for: TestKeys.daily["before"])
        Self.session(pair.phone, pair.watch, epoch: "pairing")
        let registry = pair.phone.registry
        pair.phone.close()
        let files = FileManager.default
        for suffix in ["", "-wal"] where files.fileExists(atPath: pair.folder.file("phone.sqlite") + suffix) {
            try files.copyItem(atPath: pair.folder.file("phone.sqlite") + suffix, toPath: pair.folder.file("phone-backup.sqlite") + suffix)
        }
        pair.phone = try SyncStore(path: pair.folder.file("phone.sqlite"), role: .phone, registry: registry,
                                   options: StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key"))))
        try await pair.phone.set(2, for: TestKeys.daily["phone-after"])
        try await pair.watch.set(3, for: TestKeys.daily["watch-after"])
        Self.session(pair.phone, pair.watch, epoch: "pairing")

        pair.phone.close()
        let restored = try SyncStore(path: pair.folder.file("phone-backup.sqlite"), role: .phone, registry: registry,
                                     options: StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key"))))
        defer { restored.close() }
        try restored.renewNodeID()
        try await restored.set(4, for: TestKeys.daily["restored"])
        Self.session(restored, pair.watch, epoch: "pairing")
        for store in [restored, pair.watch] {
            for (id, value) in [("before", 1), ("phone-after", 2), ("watch-after", 3), ("restored", 4)] {
                #expect(try store.storedValue(for: TestKeys.daily[id]) == value, "\(id) on the \(store.role)")
            }
        }
    }

    static func markedOptions(_ clock: ManualClock, key: String) -> StoreOptions {
        var options = StoreOptions(clock: clock, encryption: .keyFile(path: key))
        options.renewsNodeIDWhenRestored = true
        return options
    }

    /// `StoreOptions.renewsNodeIDWhenRestored`: a store keeps its node id
    /// while its marker is beside it; opened without it (restored onto a
    /// device, or copied to another) it takes a new one; a store that had
    /// none yet (the option newly on) keeps its node id.
    @Test func aStoreOpenedWithoutItsMarkerTakesANewNodeID() throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        let key = folder.file("watch.key")
        let clock = ManualClock()
        let registry = try TestKeys.registry()
        let plain = try SyncStore(path: path, role: .watch, registry: registry, options: StoreOptions(clock: clock, encryption: .keyFile(path: key)))
        let original = plain.nodeID
        plain.close()
        func open() throws -> UInt32 {
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: Self.markedOptions(clock, key: key))
            defer { store.close() }
            return store.nodeID
        }
        #expect(try open() == original, "the option newly on: the store is this device's")
        #expect(FileManager.default.fileExists(atPath: SyncStore.deviceMarkerPath(path)))
        #expect(try open() == original)

        try FileManager.default.removeItem(atPath: SyncStore.deviceMarkerPath(path))
        let restored = try open()
        #expect(restored != original, "restored onto this device: its marker was not in the backup")
        #expect(try open() == restored)

        try "another store's".write(toFile: SyncStore.deviceMarkerPath(path), atomically: true, encoding: .utf8)
        let replaced = try open()
        #expect(replaced != restored, "a marker naming another store")
        #expect(try open() == replaced)
    }

    /// A store found restored or copied at open takes `StoreOptions.nodeID`
    /// when one is given (the simulator's runs repeat), and a random id when
    /// that one is a peer's; a store that is this device's keeps its own.
    @Test func aRestoredStoreTakesTheNodeIDItsOptionsGive() throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        let key = folder.file("watch.key")
        let clock = ManualClock()
        let registry = try TestKeys.registry()
        func open(preferring node: UInt32) throws -> UInt32 {
            var options = Self.markedOptions(clock, key: key)
            options.nodeID = node
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
            defer { store.close() }
            return store.nodeID
        }
        #expect(try open(preferring: 0x51) == 0x51, "a new file")
        #expect(try open(preferring: 0x52) == 0x51, "its marker is beside it: it keeps its id")
        try FileManager.default.removeItem(atPath: SyncStore.deviceMarkerPath(path))
        #expect(try open(preferring: 0x52) == 0x52, "restored: the id its options give")
        try FileManager.default.removeItem(atPath: SyncStore.deviceMarkerPath(path))
        let random = try open(preferring: 0x52)
        #expect(random != 0x52 && random != 0, "the id it had is not taken again")
    }

    /// A copy opened without a marker keeps the copied node id until its
    /// phone refuses it; the node id it then takes is `StoreOptions.nodeID`
    /// when one is given (the simulator's runs repeat), as at open.
    @Test func aWatchRefusedForItsNodeIDTakesTheOneItsOptionsGive() async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        let plainCopy = try Self.copyWatch(&pair)
        let copiedNode = plainCopy.nodeID
        plainCopy.close()
        var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch-b.key")))
        options.nodeID = 0x5157
        let watchB = try SyncStore(path: pair.folder.file("watch-b.sqlite"), role: .watch, registry: pair.watch.registry, options: options)
        defer { watchB.close() }
        #expect(watchB.nodeID == copiedNode, "an existing file keeps its id at open")
        let refused = Self.session(pair.phone, watchB, epoch: "pairing B")
        #expect(Self.refusals(in: refused) == [SyncError.Code.nodeIDConflict.rawValue])
        #expect(watchB.nodeID == 0x5157)
        #expect(Self.refusals(in: Self.session(pair.phone, watchB, epoch: "pairing B")).isEmpty)
        #expect(try watchB.storedValue(for: TestKeys.daily["a"]) == 1)
        #expect(try pair.phone.knownPeers(ofPairing: "pairing B") == [0x5157])
    }

    /// A watch set up from a copy of another watch's store *and* its pairing
    /// secret is the same pairing to the phone, which cannot tell the two
    /// apart; with `renewsNodeIDWhenRestored` the copy, opened without its
    /// marker, takes a new node id at once, and the two watches get each
    /// other's changes (without it, neither would).
    @Test func aCopyWithTheOtherWatchsSecretTakesANewNodeIDAtOpen() async throws {
        var pair = try Pair()
        let registry = pair.watch.registry
        pair.watch.close()
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: registry,
                                   options: Self.markedOptions(pair.watchClock, key: pair.folder.file("watch.key")))
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: "one pairing")
        let plainCopy = try Self.copyWatch(&pair)
        plainCopy.close()
        let watchB = try SyncStore(path: pair.folder.file("watch-b.sqlite"), role: .watch, registry: registry,
                                   options: Self.markedOptions(pair.watchClock, key: pair.folder.file("watch-b.key")))
        defer { watchB.close() }
        #expect(watchB.nodeID != pair.watch.nodeID)
        try await pair.watch.set(2, for: TestKeys.daily["a2"])
        try await watchB.set(3, for: TestKeys.daily["b"])
        for watch in [watchB, pair.watch, watchB] {
            #expect(Self.refusals(in: Self.session(pair.phone, watch, epoch: "one pairing")).isEmpty)
        }
        for store in [pair.phone, pair.watch, watchB] {
            #expect(try store.storedValue(for: TestKeys.daily["a2"]) == 2)
            #expect(try store.storedValue(for: TestKeys.daily["b"]) == 3)
        }
    }

    /// A watch of protocol 5 or older cannot take a new node id: it goes on
    /// (its pairing becomes its node's, as before), and what the phone took
    /// from that node id goes to the watch of each pairing, so the two still
    /// get each other's changes (at the cost of a baseline at each switch).
    @Test func aWatchOfAnOlderProtocolFromACopiedStoreStillGetsTheOtherWatchsChanges() async throws {
        var pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: "pairing A")
        let watchB = try Self.copyWatch(&pair)
        defer { watchB.close() }
        let copiedNode = watchB.nodeID
        try await watchB.set(3, for: TestKeys.daily["b"])
        try await pair.watch.set(2, for: TestKeys.daily["a2"])

        let older: ClosedRange<UInt16> = 1...(SyncMessage.nodeRenewalProtocol - 1)
        #expect(Self.refusals(in: Self.session(pair.phone, watchB, epoch: "pairing B", protocolRange: older)).isEmpty)
        Self.session(pair.phone, pair.watch, epoch: "pairing A", protocolRange: older)
        Self.session(pair.phone, watchB, epoch: "pairing B", protocolRange: older)
        #expect(watchB.nodeID == copiedNode)
        for store in [pair.phone, pair.watch, watchB] {
            #expect(try store.storedValue(for: TestKeys.daily["a2"]) == 2)
            #expect(try store.storedValue(for: TestKeys.daily["b"]) == 3)
        }
    }

    /// Through the mailbox alone: a watch of protocol 6 says first that it
    /// takes a new node id when refused for its own (`renewsNodeID`), so the
    /// phone refuses the copy's node id, bound to the other pairing; the copy
    /// takes a new one and posts again under it. Each watch gets the other's
    /// changes, and the mailboxes go quiet (before, the node id's pairing
    /// followed each message read, with a baseline each time, for ever).
    /// A copy of an older protocol cannot take a new node id: it keeps its
    /// own, which becomes its pairing's, and the other watch takes a new one.
    /// A phone of an older protocol serves both as before (the pairing follows
    /// each message), and still each watch gets the other's changes.
    @Test(arguments: [ThroughMailboxes.current, .olderWatch, .olderPhone])
    func throughTheMailboxAloneACopiedWatchGetsTheOtherWatchsChanges(builds: ThroughMailboxes) async throws {
        var pair = try Pair()
        let pairingA = PairingSecret.generate()
        let pairingB = PairingSecret.generate()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: pairingA.epoch)
        let watchB = try Self.copyWatch(&pair)
        defer { watchB.close() }
        let copiedNode = watchB.nodeID
        try await pair.watch.set(2, for: TestKeys.daily["a2"])
        try await watchB.set(3, for: TestKeys.daily["b"])

        func configuration(_ pairing: PairingSecret, older: Bool) -> ReplicationConfiguration {
            var configuration = ReplicationConfiguration(pairingEpoch: pairing.epoch)
            if older { configuration.protocolRange = 1...(SyncMessage.nodeRenewalProtocol - 1) }
            return configuration
        }
        let (folderA, folderB) = (TempFolder(), TempFolder())
        let phone = SyncPeer(store: pair.phone, configuration: configuration(pairingA, older: builds == .olderPhone))
        let watches = [(SyncPeer(store: pair.watch, configuration: configuration(pairingA, older: false)),
                        try Mailbox(directory: folderA.path, role: .watch, secret: pairingA),
                        try Mailbox(directory: folderA.path, role: .phone, secret: pairingA)),
                       (SyncPeer(store: watchB, configuration: configuration(pairingB, older: builds == .olderWatch)),
                        try Mailbox(directory: folderB.path, role: .watch, secret: pairingB),
                        try Mailbox(directory: folderB.path, role: .phone, secret: pairingB))]
        /// One round of each watch with the phone; the messages the phone posted.
        func round() throws -> Int {
            var posted = 0
            for (watch, watchBox, phoneBox) in watches {
                _ = try watch.deliverQueued(through: watchBox)
                posted += try phone.deliverQueued(through: phoneBox).messagesPosted
                _ = try watch.deliverQueued(through: watchBox)
            }
            return posted
        }
        for _ in 0..<6 { _ = try round() }
        for store in [pair.phone, pair.watch, watchB] {
            #expect(try store.storedValue(for: TestKeys.daily["a"]) == 1)
            #expect(try store.storedValue(for: TestKeys.daily["a2"]) == 2, "a2 on \(store.path)")
            #expect(try store.storedValue(for: TestKeys.daily["b"]) == 3, "b on \(store.path)")
        }
        switch builds {
        case .current:
            #expect(watchB.nodeID != copiedNode && pair.watch.nodeID == copiedNode, "the copy took a new node id")
        case .olderWatch:
            // The copy cannot take one: the node id became its pairing's, and the watch of the other gave way.
            #expect(watchB.nodeID == copiedNode && pair.watch.nodeID != copiedNode, "the source took a new node id")
        case .olderPhone:
            #expect(watchB.nodeID == copiedNode && pair.watch.nodeID == copiedNode)
        }
        if builds != .olderPhone {
            #expect(try pair.phone.knownPeers(ofPairing: pairingA.epoch) == [pair.watch.nodeID])
            #expect(try pair.phone.knownPeers(ofPairing: pairingB.epoch) == [watchB.nodeID])
            #expect(try round() == 0, "the mailboxes are quiet")
        }
    }

    /// A queued refusal of a watch's node id names it: a watch that took a
    /// new one since (the phone refused it live, or refused an older message
    /// once more after a restart) keeps the one it has; one that names its
    /// node id makes it take a new one, and what it posted goes again under it.
    @Test func aQueuedRefusalOfAnotherNodeIDIsPassedOverAndOfItsOwnRenewsIt() async throws {
        let pair = try Pair()
        let pairing = PairingSecret.generate()
        let folder = TempFolder()
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch))
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        try await pair.watch.set(4, for: TestKeys.daily["w"])
        _ = try watch.deliverQueued(through: watchBox)
        let phoneHeader = QueuedHeader(protocolVersion: 1, node: pair.phone.nodeID, role: .phone, pairingEpoch: pairing.epoch,
                                       registryFingerprint: pair.phone.registry.fingerprint(for: .phone))
        func refuse(_ node: UInt32) throws {
            let error = SyncError.nodeIDConflict(node: node)
            try phoneBox.post(QueuedMessage.refusal(phoneHeader, code: error.code.rawValue, message: error.message).frame())
        }
        /// The node ids of the batches waiting for the phone that carry `key`.
        func batches(of key: Key<Int>) throws -> [UInt32] {
            try watchBox.outgoingMessages().compactMap { message -> UInt32? in
                guard case .batch(let header, _, _, let entries) = try QueuedMessage(frame: message.frame),
                      entries.contains(where: { $0.key == key.name }) else { return nil }
                return header.node
            }
        }
        let old = pair.watch.nodeID
        try refuse(old &+ 1)
        var report = try watch.deliverQueued(through: watchBox)
        #expect(pair.watch.nodeID == old && report.refused.isEmpty)
        try await pair.watch.set(5, for: TestKeys.daily["x"])
        _ = try watch.deliverQueued(through: watchBox)
        #expect(try batches(of: TestKeys.daily["x"]) == [old], "posting went on")
        try refuse(old)
        report = try watch.deliverQueued(through: watchBox)
        #expect(pair.watch.nodeID != old)
        #expect(report.refused.map(\.code) == [.nodeIDConflict])
        // What it posted goes again, under the new node id.
        #expect(try batches(of: TestKeys.daily["w"]) == [old, pair.watch.nodeID])
        #expect(try batches(of: TestKeys.daily["x"]) == [old, pair.watch.nodeID])
        #expect(SyncError.conflictingNode(in: SyncError.nodeIDConflict(node: 0xFFFF_FFFF).message) == 0xFFFF_FFFF)
        for text in ["", "the watch's node id ", "the watch's node id 123456789 belongs", "the watch's node id zz", "node id 12"] {
            #expect(SyncError.conflictingNode(in: text) == nil, "\(text)")
        }
    }

    enum ThroughMailboxes: String, CustomTestStringConvertible, Sendable {
        case current, olderWatch, olderPhone
        var testDescription: String { rawValue }
    }

    /// Two processes share a store file (an app and its extension): the
    /// second to hear of the conflict keeps the node id the first took,
    /// rather than taking a third.
    @Test func renewingKeepsANodeIDAnotherProcessTook() async throws {
        let pair = try Pair()
        let old = pair.watch.nodeID
        let other = try SyncStore(path: pair.watch.path, role: .watch, registry: pair.watch.registry,
                                  options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key"))))
        defer { other.close() }
        let renewed = try other.renewNodeID(replacing: old)
        #expect(renewed != old && renewed != 0)
        #expect(try pair.watch.renewNodeID(replacing: old) == renewed)
        #expect(pair.watch.nodeID == renewed)
        try await pair.watch.set(7, for: TestKeys.steps)
        #expect(try pair.watch.entryInfo(forKey: TestKeys.steps.name)?.version.node == renewed)
        // Asked by name (the app knows its store is a copy), it always takes a new one.
        let again = try pair.watch.renewNodeID()
        #expect(again != renewed && pair.watch.nodeID == again)
    }

    /// Over TCP, both watches connected to one listener at once: the copy is
    /// refused once, redials with its new node id, and from then on neither
    /// session replaces the other (before, each newly established session of
    /// the shared node id replaced the other's, and neither watch got the
    /// other's changes).
    @Test func twoWatchesLiveAtOnceOneFromACopiedStoreBothSync() async throws {
        var pair = try Pair()
        let pairingA = PairingSecret.generate()
        let pairingB = PairingSecret.generate()
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        Self.session(pair.phone, pair.watch, epoch: pairingA.epoch)  // the phone met watch A
        let watchB = try Self.copyWatch(&pair)
        defer { watchB.close() }
        let copiedNode = watchB.nodeID
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pairingA.epoch),
                             tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secrets: [pairingA, pairingB]))
        let server = Task { await phone.serve(listener) }
        let port = listener.port
        let watchA = pair.watch
        let refusedB = watchB.events()
        let clients = [(watchA, pairingA), (watchB, pairingB)].map { store, pairing in
            let watch = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                                 tickInterval: .milliseconds(50))
            return Task { await watch.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: pairing)) }
        }
        let outcome = await Result {
            try await first(of: refusedB, "watch B to hear that its node id is taken") { event in
                if case .error(let error) = event, error.code == .nodeIDConflict { return true }
                return false
            }
            try await watchA.set(2, for: TestKeys.daily["a2"])
            try await watchB.set(3, for: TestKeys.daily["b"])
            try await eventually(watchA, "watch B's change on watch A") { try watchA.storedValue(for: TestKeys.daily["b"]) == 3 }
            try await eventually(watchB, "watch A's changes on watch B") {
                try watchB.storedValue(for: TestKeys.daily["a2"]) == 2 && watchB.storedValue(for: TestKeys.daily["a"]) == 1
            }
        }
        for client in clients { client.cancel() }
        server.cancel()
        await listener.close()
        try await withDeadline("the watches and the phone to stop") {
            for client in clients { _ = await client.value }
            _ = await server.value
        }
        try outcome.get()
        #expect(watchB.nodeID != copiedNode && watchA.nodeID == copiedNode)
    }

    /// A live session's hello named the watch's node id; once the store
    /// takes another (here the app renews it; the mailbox's refusal does the
    /// same), that session ends and the next one names the new id, so the
    /// phone meets the watch under it and sends it what the old id wrote.
    @Test func aLiveSessionStartsAgainUnderARenewedNodeID() async throws {
        let pair = try Pair()
        let pairing = PairingSecret.generate()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                             tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secrets: [pairing]))
        let server = Task { await phone.serve(listener) }
        let watchStore = pair.watch
        let watch = SyncPeer(store: watchStore, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                             tickInterval: .milliseconds(50))
        let phoneEvents = pair.phone.events()
        let port = listener.port
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: pairing)) }
        let old = watchStore.nodeID
        let outcome = await Result {
            try await first(of: phoneEvents, "the phone to meet the watch") { event in
                if case .connected(let node, _) = event { return node == old }
                return false
            }
            try await watchStore.set(1, for: TestKeys.daily["a"])
            try await eventually(pair.phone, "the watch's write on the phone") { try pair.phone.storedValue(for: TestKeys.daily["a"]) == 1 }
            let phonePeerEvents = pair.phone.peerEvents()
            let renewed = try watchStore.renewNodeID()
            #expect(renewed != old)
            try await first(of: phoneEvents, "the phone to meet the watch under its new node id") { event in
                if case .connected(let node, _) = event { return node == renewed }
                return false
            }
            // The old session's end may be noticed after the new one is met (before or after: the stream keeps it).
            try await first(of: phonePeerEvents, "the phone's session with the old node id to end") { event in
                if case .disconnected = event.event { return event.peer == old }
                return false
            }
            try await watchStore.set(2, for: TestKeys.daily["b"])
            try await eventually(pair.phone, "the renewed watch's write on the phone") { try pair.phone.storedValue(for: TestKeys.daily["b"]) == 2 }
            // Checked once the new session applied a batch: the `.connected` event leaves the session's
            // loop before the loop records the session as established, which it does before its next input.
            #expect(phone.connectedPeers == [renewed])
        }
        client.cancel()
        server.cancel()
        await listener.close()
        try await withDeadline("the watch and the phone to stop") {
            _ = await client.value
            _ = await server.value
        }
        try outcome.get()
    }
}

import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A device whose storage is full (the crash VFS refuses every write that
/// would make a file longer, as a full file system does): writes fail with
/// `storage-full`, nothing stored before is lost, a peer sees why its batches
/// are not taken, and all of it goes through once there is room.
@Suite(.serialized, .timeLimit(.minutes(5))) struct StorageFullTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-storage-full")

    /// A store on the disk that fills up (system clock, no key file; every
    /// commit synced, so the files on disk show their sizes).
    static func store(_ folder: TempFolder, _ name: String, role: DeviceRole) throws -> SyncStore {
        var options = StoreOptions()
        options.vfsName = vfs.name
        options.durability = .full
        return try SyncStore(path: folder.file(name), role: role, registry: KeyRegistry([TestKeys.steps, TestKeys.daily]), options: options)
    }

    /// A phone on the real disk and a watch on the disk that fills up, of one pairing.
    struct PhoneAndWatch {
        let folder = TempFolder()
        let mailboxFolder = TempFolder()
        let phone: SyncStore
        let watch: SyncStore
        let secret = PairingSecret.generate()
        var configuration: ReplicationConfiguration { ReplicationConfiguration(pairingEpoch: secret.epoch) }

        init() throws {
            phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: KeyRegistry([TestKeys.steps, TestKeys.daily]))
            watch = try StorageFullTests.store(folder, "watch.sqlite", role: .watch)
        }

        /// The two ends of a mailbox of their pairing, in a folder of its own.
        func mailboxes() throws -> (phone: Mailbox, watch: Mailbox) {
            (try Mailbox(directory: mailboxFolder.path, role: .phone, secret: secret),
             try Mailbox(directory: mailboxFolder.path, role: .watch, secret: secret))
        }

        /// Closes both, and gives the disk its room back.
        func close() {
            phone.close()
            watch.close()
            StorageFullTests.vfs.setDiskFull(false)
        }
    }

    static func isStorageFull(_ event: SyncEvent) -> Bool {
        if case .error(let error) = event { return error.code == .storageFull }
        return false
    }

    @Test func aWriteOnAFullDiskThrowsStorageFullAndKeepsWhatWasStored() async throws {
        let folder = TempFolder()
        let store = try Self.store(folder, "watch.sqlite", role: .watch)
        defer {
            store.close()
            Self.vfs.setDiskFull(false)
        }
        try await store.set(1, for: TestKeys.steps)
        Self.vfs.setDiskFull(true)
        var codes: [SyncError.Code?] = []
        for i in 0..<500 {
            do {
                try await store.set(i, for: TestKeys.daily["d\(i)"])
                codes.append(nil)
            } catch {
                codes.append((error as? SyncError)?.code)
            }
        }
        #expect(Set(codes) == [.storageFull])
        #expect(Self.vfs.statistics.fullWrites >= 500)
        await #expect(throws: SyncError.self) { try await store.set(2, for: TestKeys.steps) }
        #expect(try store.value(for: TestKeys.steps) == 1)
        #expect(try store.storedValue(for: TestKeys.steps) == 1)
        #expect(try store.storedValue(for: TestKeys.daily["d0"]) == nil)

        Self.vfs.setDiskFull(false)
        try await store.set(3, for: TestKeys.steps)
        try await store.set(7, for: TestKeys.daily["d0"])
        #expect(try store.storedValue(for: TestKeys.steps) == 3)
        #expect(try store.storedValue(for: TestKeys.daily["d0"]) == 7)
    }

    /// A store opens on a full disk, and reads what it holds: the tombstone
    /// purge it runs at open (which records a purge mark for each known peer)
    /// waits for room instead of failing the open.
    @Test func aStoreOpensOnAFullDiskAndReads() async throws {
        let folder = TempFolder()
        do {
            let store = try Self.store(folder, "watch.sqlite", role: .watch)
            try await store.set(6, for: TestKeys.steps)
            _ = try store.recordPeer(node: 0x1001, role: .phone, epoch: "pairing")
            store.close()
        }
        Self.vfs.setDiskFull(true)
        defer { Self.vfs.setDiskFull(false) }
        let store = try Self.store(folder, "watch.sqlite", role: .watch)
        defer { store.close() }
        #expect(try store.value(for: TestKeys.steps) == 6)
        await #expect(throws: SyncError.self) { try await store.set(7, for: TestKeys.steps) }
        Self.vfs.setDiskFull(false)
        try await store.set(7, for: TestKeys.steps)
        #expect(try store.storedValue(for: TestKeys.steps) == 7)
    }

    #if os(Linux)
    /// A value file (`FileValueStore`) that the device has no room for is
    /// `storage-full` too (a real `ENOSPC`, from `/dev/full`).
    @Test func aValueFileWithNoRoomIsStorageFull() throws {
        let full = open("/dev/full", O_WRONLY | O_CLOEXEC)
        try #require(full >= 0)
        defer { close(full) }
        let failure = try #require(FileWrite.writeAll(Array(repeating: 7, count: 10_000), to: full))
        #expect(ValueFiles.fileError(failure, "write", "values/a.value").code == .storageFull)
        #expect(ValueFiles.fileError(EACCES, "write", "values/a.value").code == .database)
    }
    #endif

    /// The watch's session ends with `storage-full` and the phone's reports
    /// it as the watch's reason; nothing is acknowledged, and the watch pauses
    /// before dialing again (it redialed at the backoff's pace). Once it has
    /// room, its app's write ends the pause and the next session brings everything.
    @Test func aFullWatchTakesNothingThePhoneSeesWhyAndAllArrivesOnceThereIsRoom() async throws {
        let stores = try PhoneAndWatch()
        defer { stores.close() }
        let (phoneStore, watchStore, secret, configuration) = (stores.phone, stores.watch, stores.secret, stores.configuration)
        let phone = SyncPeer(store: phoneStore, configuration: configuration, tickInterval: .milliseconds(50))
        var pausing = configuration
        pausing.storageFullRetryInterval = .seconds(600)
        let watch = SyncPeer(store: watchStore, configuration: pausing, tickInterval: .milliseconds(50))
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let serving = Task { await phone.serve(listener) }
        let dialing = Task {
            await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp,
                                           policy: ReconnectPolicy(initialDelay: .milliseconds(20), maxDelay: .milliseconds(200)))
        }
        let outcome = await Result {
            try await reachability(of: [phone, watch], becomes: true, "the watch to be live")
            let phoneEvents = phoneStore.events()
            let watchEvents = watchStore.events()
            let watchWaits = watchStore.timedWaits.subscribe()
            Self.vfs.setDiskFull(true)
            let rows = (0..<3_000).map { BackendWrite(key: TestKeys.daily["d\($0)"].name, bytes: Array("\($0)".utf8)) }
            try phoneStore.commit(rows)
            try await first(of: watchEvents, "the watch's storage-full error") { Self.isStorageFull($0) }
            try await first(of: phoneEvents, "the phone's storage-full error from the watch") { Self.isStorageFull($0) }
            // The watch does not redial at the backoff's pace (20-200 ms here), each session sending the batches again.
            try await first(of: watchWaits, "the watch's pause before dialing again") { $0 == .storageFullPause(.seconds(600)) }
            #expect(try phoneStore.pendingSummary(for: watchStore.nodeID).total == 3_000)
            #expect(try watchStore.storedValue(for: TestKeys.daily["d0"]) == nil)

            // Room again: the watch's app writes, which ends the pause.
            Self.vfs.setDiskFull(false)
            try await watchStore.set(9, for: TestKeys.steps)
            try await eventually(watchStore, "every row on the watch") { try watchStore.storedValue(for: TestKeys.daily["d2999"]) == 2_999 }
            try await eventually(phoneStore, "the watch's write on the phone") { try phoneStore.storedValue(for: TestKeys.steps) == 9 }
            try await phone.waitUntilIdle(timeout: waitLimit)
            #expect(try phoneStore.pendingSummary(for: watchStore.nodeID).total == 0)
            #expect(try watchStore.storedValue(for: TestKeys.daily["d0"]) == 0)
        }
        dialing.cancel()
        serving.cancel()
        await listener.close()
        try await withDeadline("the peers to stop") {
            _ = await dialing.value
            _ = await serving.value
        }
        try outcome.get()
    }

    /// A full watch ends the session with an error frame that says
    /// `storage-full` and names nothing of the watch's file system: the
    /// message sent named the store's full path (the watch's log and its own
    /// error event keep it).
    @Test func theErrorFrameOfAFullWatchNamesNoPathOfIt() async throws {
        let stores = try PhoneAndWatch()
        defer { stores.close() }
        let phone = ReplicationEndpoint(store: stores.phone, configuration: stores.configuration)
        let watch = ReplicationEndpoint(store: stores.watch, configuration: stores.configuration)
        var errors: [SyncMessage.ErrorMessage] = []
        func run(toWatch: [Frame], toPhone: [Frame]) {
            var (toWatch, toPhone) = (toWatch, toPhone)
            for _ in 0..<1_000 where !(toWatch.isEmpty && toPhone.isEmpty) {
                let (sendWatch, sendPhone) = (toWatch, toPhone)
                (toWatch, toPhone) = ([], [])
                for frame in sendPhone { toWatch += phone.receive(frame, now: 1_000) }
                for frame in sendWatch {
                    let answers = watch.receive(frame, now: 1_000)
                    for case .error(let error)? in answers.map({ try? SyncMessage(frame: $0) }) { errors.append(error) }
                    toPhone += answers
                }
            }
        }
        run(toWatch: phone.start(now: 1_000), toPhone: watch.start(now: 1_000))
        #expect(phone.isEstablished && watch.isEstablished)
        Self.vfs.setDiskFull(true)
        try await stores.phone.set(5, for: TestKeys.steps)
        run(toWatch: phone.pump(now: 1_000), toPhone: [])
        #expect(errors.map(\.code) == [SyncError.Code.storageFull.rawValue])
        #expect(watch.failure?.code == .storageFull)
        #expect(watch.failure?.message.contains(stores.folder.path) == true, "the watch's own error keeps the path")
        for error in errors {
            #expect(!error.message.contains(stores.folder.path), "\(error.message)")
            #expect(!error.message.contains("watch.sqlite"), "\(error.message)")
        }
        #expect(phone.failure?.code == .storageFull)
        #expect(phone.failure.map { !$0.message.contains(stores.folder.path) } == true)
    }

    /// `runQueued` on a full watch: after the round that failed, the next
    /// timed round comes after the pause (it came at the poll interval, each
    /// reading and decrypting the message again); a local write, once there
    /// is room, starts a round at once, which applies what waited.
    @Test func queuedRoundsPauseWhileTheWatchIsFull() async throws {
        let stores = try PhoneAndWatch()
        defer { stores.close() }
        let (phoneStore, watchStore) = (stores.phone, stores.watch)
        var configuration = stores.configuration
        configuration.storageFullRetryInterval = .seconds(600)
        let phone = SyncPeer(store: phoneStore, configuration: configuration)
        let watch = SyncPeer(store: watchStore, configuration: configuration)
        let (phoneBox, watchBox) = try stores.mailboxes()
        try await phoneStore.set(4, for: TestKeys.steps)
        #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 1)

        Self.vfs.setDiskFull(true)
        let waits = watchStore.timedWaits.subscribe()
        let rounds = Task { await watch.runQueued(through: watchBox, pollInterval: .milliseconds(5), quietPollInterval: .milliseconds(20)) }
        let outcome = await Result {
            try await first(of: waits, "the pause after the round that failed") { $0 == .queuedRound(.seconds(600)) }
            #expect(try watchBox.incomingCount() == 1)
            Self.vfs.setDiskFull(false)
            try await watchStore.set(1, for: TestKeys.daily["from-the-watch"])
            try await eventually(watchStore, "the queued steps on the watch") { try watchStore.storedValue(for: TestKeys.steps) == 4 }
        }
        rounds.cancel()
        try await withDeadline("the rounds to end") { await rounds.value }
        try outcome.get()
    }

    /// A queued message that a full watch cannot apply stays in its inbox
    /// (neither accepted nor refused) and is applied by the first round with room.
    @Test func aFullWatchKeepsAQueuedMessageUntilThereIsRoom() async throws {
        let stores = try PhoneAndWatch()
        defer { stores.close() }
        let (phoneStore, watchStore, configuration) = (stores.phone, stores.watch, stores.configuration)
        let phone = SyncPeer(store: phoneStore, configuration: configuration)
        let watch = SyncPeer(store: watchStore, configuration: configuration)
        let (phoneBox, watchBox) = try stores.mailboxes()
        try await phoneStore.set(4, for: TestKeys.steps)
        #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 1)

        let watchEvents = watchStore.events()
        Self.vfs.setDiskFull(true)
        let full = try watch.deliverQueued(through: watchBox)
        #expect(full.entriesApplied == 0)
        try await first(of: watchEvents, "the watch's storage-full error") { Self.isStorageFull($0) }
        #expect(try watchBox.incomingCount() == 1)
        #expect(try watchBox.refusedFiles().isEmpty)
        #expect(watchBox.acceptedSequence == 0)

        Self.vfs.setDiskFull(false)
        #expect(try watch.deliverQueued(through: watchBox).entriesApplied == 1)
        #expect(try watchStore.storedValue(for: TestKeys.steps) == 4)
        #expect(try watchBox.incomingCount() == 0)
    }
}

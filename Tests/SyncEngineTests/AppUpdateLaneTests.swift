import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// An app update that makes a key sync (`never` to automatic, `phoneOnly` to
/// `all`, `manual` to automatic) sends what was written before it: it did
/// not, and the two devices kept different values of a key they now share
/// until it was written again.
@Suite struct AppUpdateLaneTests {
    enum Before {
        static let units = Key<String>("units", default: "metric", availability: .all, policy: .never)
        static let plan = Key<String>("plan", default: "", availability: .all, policy: .manual)
        static let streak = Key<Int>("streak", default: 0, availability: .phoneOnly, policy: .automaticSmall)
        static let draft = Key<String>("draft", default: "", availability: .all, policy: .never)
        static let face = Key<String>("face", default: "", availability: .phoneWithWatchSync, policy: .automaticSmall)
        static let days = KeyFamily<Int>("day", default: 0, availability: .all, policy: .never)
        static let all: [any KeyDeclaration] = [units, plan, streak, draft, face, days]
    }

    enum After {
        static let units = Key<String>("units", default: "metric", availability: .all, policy: .automaticSmall)
        static let plan = Key<String>("plan", default: "", availability: .all, policy: .automaticSmall)
        static let streak = Key<Int>("streak", default: 0, availability: .all, policy: .automaticSmall)
        static let draft = Key<String>("draft", default: "", availability: .all, policy: .manual)
        static let face = Key<String>("face", default: "", availability: .all, policy: .automaticSmall)
        static let days = KeyFamily<Int>("day", default: 0, availability: .all, policy: .automaticSmall)
        static let all: [any KeyDeclaration] = [units, plan, streak, draft, face, days]
    }

    /// Both stores (or only `role`'s) closed and opened again with `keys`, as an app update does.
    static func update(_ pair: inout Pair, to keys: [any KeyDeclaration], only role: DeviceRole? = nil,
                       configure: (inout StoreOptions) -> Void = { _ in }) throws {
        let registry = try KeyRegistry(keys)
        if role != .watch {
            pair.phone.close()
            var options = StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key")))
            configure(&options)
            pair.phone = try SyncStore(path: pair.folder.file("phone.sqlite"), role: .phone, registry: registry, options: options)
        }
        if role != .phone {
            pair.watch.close()
            var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
            configure(&options)
            pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: registry, options: options)
        }
    }

    /// A delete made while the key stayed on the device, older than the
    /// tombstone retention when the update opens the store: it goes, and
    /// wins over the watch's earlier value. The open purged it first, as a
    /// local delete nobody would ask for, and the watch's value came back.
    @Test func aDeleteKeptLocalPastTheRetentionGoesWhenTheKeySyncs() async throws {
        let retention: (inout StoreOptions) -> Void = { $0.tombstoneRetention = .seconds(10) }
        var pair = try Pair(keys: Before.all, configure: retention)
        try await pair.watch.set("watch", for: Before.units)
        pair.phoneClock.advance(by: 1_000)
        try await pair.phone.set("phone", for: Before.units)
        try await pair.phone.remove(Before.units)
        Link(pair.phone, pair.watch).connect()  // the phone knows its watch: it purges
        pair.phoneClock.advance(by: 60_000)
        pair.watchClock.advance(by: 60_000)

        try Self.update(&pair, to: After.all, configure: retention)
        Link(pair.phone, pair.watch).connect()
        for store in [pair.phone, pair.watch] {
            #expect(try store.entryInfo(forKey: After.units.name)?.isDeleted == true, "\(store.role): the phone's later delete")
        }
    }

    @Test func valuesWrittenBeforeAnUpdateThatMakesTheirKeysSyncGoAndConverge() async throws {
        var pair = try Pair(keys: Before.all)
        try await pair.phone.set("metric-phone", for: Before.units)
        try await pair.phone.set("intervals", for: Before.plan)
        try await pair.phone.set(12, for: Before.streak)
        try await pair.phone.set(7, for: Before.days["mon"])
        try await pair.phone.remove(Before.days["tue"])
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.set("imperial-watch", for: Before.units)
        try await pair.watch.set(3, for: Before.days["tue"])
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: Before.streak.name) == nil, "nothing of those keys crosses before the update")
        #expect(try pair.watch.storedValue(for: Before.units) == "imperial-watch")

        try Self.update(&pair, to: After.all)
        Link(pair.phone, pair.watch).connect()
        for store in [pair.phone, pair.watch] {
            #expect(try store.storedValue(for: After.streak) == 12, "\(store.role)")
            #expect(try store.storedValue(for: After.plan) == "intervals", "\(store.role)")
            #expect(try store.storedValue(for: After.units) == "imperial-watch", "\(store.role): the later write wins on both")
            #expect(try store.storedValue(for: After.days["mon"]) == 7, "\(store.role)")
            #expect(try store.storedValue(for: After.days["tue"]) == 3, "\(store.role): the watch's later write over the phone's removal")
        }
        #expect(try pair.phone.pendingSummary().total == 0)
        #expect(try pair.watch.pendingSummary().total == 0)

        // Once per registry: opening again with it moves nothing.
        let sequence = try #require(try pair.phone.entryInfo(forKey: After.streak.name)).changeSequence
        try Self.update(&pair, to: After.all)
        #expect(try pair.phone.entryInfo(forKey: After.streak.name)?.changeSequence == sequence)
    }

    /// A key an update stopped syncing and a later one syncs again: what was
    /// written before the first, and had not gone, goes (each session had
    /// passed over it while the key stayed on the device, and moved past it).
    @Test func aKeyThatSyncsAgainAfterAnUpdateThatKeptItLocalSendsWhatHadNotGone() async throws {
        var pair = try Pair(keys: After.all)
        try await pair.phone.set(12, for: After.streak)
        try await pair.phone.set(7, for: After.days["mon"])
        try Self.update(&pair, to: Before.all)  // streak phoneOnly, the days never
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: After.streak.name) == nil)
        #expect(try pair.watch.entryInfo(forKey: After.days["mon"].name) == nil)

        try Self.update(&pair, to: After.all)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.storedValue(for: After.streak) == 12)
        #expect(try pair.watch.storedValue(for: After.days["mon"]) == 7)
        #expect(try pair.phone.pendingSummary().total == 0)
    }

    /// A value of another encoding than the key's now stays where it was:
    /// the peer would refuse it (`policy-violation`), and the writer would
    /// report the refusal.
    @Test func aValueOfAnEncodingTheUpdateChangedStaysOnTheDevice() async throws {
        let before = Key<String>("motto", default: "", availability: .all, policy: .never)
        let after = Key<String>("motto", default: "", availability: .all, policy: .automaticSmall, serializer: .string)
        var pair = try Pair(keys: [before])
        try await pair.phone.set("carpe diem", for: before)
        Link(pair.phone, pair.watch).connect()
        try Self.update(&pair, to: [after])
        #expect(try pair.phone.entryInfo(forKey: after.name)?.lane == SyncLane.none)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(pair.watch.syncCounters.entriesRejected == 0, "the watch refused the old encoding")
        #expect(try pair.watch.entryInfo(forKey: after.name) == nil)
    }

    /// A key that becomes manual waits for `sync()`, as a change of a manual
    /// key does; a copy the watch took from the phone goes on automatically,
    /// and never back to the phone.
    @Test func aKeyThatBecomesManualWaitsAndACopyTakenFromThePhoneIsNotSentBack() async throws {
        var pair = try Pair(keys: Before.all)
        try await pair.phone.set("draft", for: Before.draft)
        try await pair.phone.set("round", for: Before.face)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.storedValue(for: Before.face) == "round")
        #expect(try pair.watch.entryInfo(forKey: Before.face.name)?.lane == SyncLane.none)
        let received = pair.phone.syncCounters.entriesReceived

        try Self.update(&pair, to: After.all)
        #expect(try pair.phone.entryInfo(forKey: After.draft.name)?.lane == .manual)
        #expect(try pair.phone.pendingSummary().manualWaiting == 1)
        #expect(try pair.watch.entryInfo(forKey: After.face.name)?.lane == .automatic)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: After.draft.name) == nil, "a manual change waits for sync()")
        #expect(pair.phone.syncCounters.entriesReceived == received, "the watch sent the phone's own value back")
        #expect(try pair.watch.pendingSummary(for: pair.phone.nodeID).total == 0)

        #expect(try pair.phone.requestManualSync() == 1)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.storedValue(for: After.draft) == "draft")
    }

    /// An update that makes an automatic key `manual`: a change written
    /// before it that had not gone waits for `sync()`, as one written after
    /// it does (it went without one); a change the watch already has is not
    /// queued again.
    @Test func aChangeNotYetSentOfAKeyThatBecomesManualWaitsForSync() async throws {
        let noteBefore = Key<String>("note", default: "", availability: .all, policy: .automaticSmall)
        let countBefore = Key<Int>("count", default: 0, availability: .all, policy: .automaticSmall)
        let noteAfter = Key<String>("note", default: "", availability: .all, policy: .manual)
        let countAfter = Key<Int>("count", default: 0, availability: .all, policy: .manual)
        var pair = try Pair(keys: [noteBefore, countBefore])
        try await pair.phone.set(1, for: countBefore)
        Link(pair.phone, pair.watch).connect()
        try await pair.phone.set("draft", for: noteBefore)  // the watch is away

        try Self.update(&pair, to: [noteAfter, countAfter])
        #expect(try pair.phone.entryInfo(forKey: noteAfter.name)?.lane == .manual)
        #expect(try pair.phone.entryInfo(forKey: countAfter.name)?.lane == .automatic, "the watch has it: nothing to wait for")
        #expect(try pair.phone.pendingSummary().manualWaiting == 1)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: noteAfter.name) == nil, "a change of a key now manual went without sync()")

        #expect(try pair.phone.requestManualSync() == 1)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.storedValue(for: noteAfter) == "draft")
        #expect(try pair.phone.pendingSummary().total == 0)
    }

    /// The same when the watch's app was updated first: the phone's change
    /// was passed over while the two declared the key differently (the
    /// session moved past it), and goes once they agree, but only with
    /// `sync()` now that the phone's app declares the key `manual` too.
    @Test func aChangePassedOverWhileTheAppsDifferedWaitsForSyncWhenTheKeyBecomesManual() async throws {
        let noteBefore = Key<String>("note", default: "", availability: .all, policy: .automaticSmall)
        let noteAfter = Key<String>("note", default: "", availability: .all, policy: .manual)
        var pair = try Pair(keys: [noteBefore])
        try Self.update(&pair, to: [noteAfter], only: .watch)
        try await pair.phone.set("draft", for: noteBefore)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: noteAfter.name) == nil, "declared differently: not sent")

        try Self.update(&pair, to: [noteAfter], only: .phone)
        #expect(try pair.phone.entryInfo(forKey: noteAfter.name)?.lane == .manual)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.entryInfo(forKey: noteAfter.name) == nil, "a change of a key now manual went without sync()")

        #expect(try pair.phone.requestManualSync() == 1)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.storedValue(for: noteAfter) == "draft")
    }

    /// One file system per test whose disk fills up (tests run in parallel).
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full")
    static let vfsHeldStream = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-stream")
    static let vfsHeldRepair = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-repair")
    static let vfsHeldQueue = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-queue")
    static let vfsRetried = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-retried")
    static let vfsRetriedAfterApply = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-retried-apply")
    static let vfsRetriedAfterOther = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-retried-other")

    /// Opens a device's store in `folder` with `keys`, on `vfs` (whose disk a test fills).
    static func opener(_ folder: TempFolder, vfs: CrashVFS,
                       clock: any PhysicalClock = SystemClock()) -> (DeviceRole, [any KeyDeclaration]) throws -> SyncStore {
        { role, keys in
            var options = StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("\(role).key")))
            options.vfsName = vfs.name
            options.externalChangePollInterval = nil
            return try SyncStore(path: folder.file("\(role).sqlite"), role: role, registry: KeyRegistry(keys), options: options)
        }
    }

    /// The update opens on a full disk: the entries move once there is room,
    /// at a session's tick, and go.
    @Test func aFullDiskAtTheUpdatePutsTheMoveOffUntilThereIsRoom() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfs)
        var phone = try open(.phone, Before.all)
        try await phone.set(12, for: Before.streak)
        phone.close()

        Self.vfs.setDiskFull(true)
        defer { Self.vfs.setDiskFull(false) }
        phone = try open(.phone, After.all)
        #expect(try phone.entryInfo(forKey: After.streak.name)?.lane == SyncLane.none, "moved on a full disk")
        Self.vfs.setDiskFull(false)
        let watch = try open(.watch, After.all)
        let link = Link(phone, watch)
        link.connect()
        #expect(try watch.entryInfo(forKey: After.streak.name) == nil, "nothing moves before a tick")
        // Not idle meanwhile: a session that said so would see no reason to tick again (fuzz seed 499800562).
        #expect(link.a.idleBlockers.contains { $0.contains("wait for room") }, "\(link.a.idleBlockers)")
        link.run(link.a.tick(now: link.now + 1_000), [])
        #expect(try phone.entryInfo(forKey: After.streak.name)?.lane == .automatic)
        #expect(try watch.storedValue(for: After.streak) == 12)
        #expect(link.a.idleBlockers.isEmpty, "\(link.a.idleBlockers)")
    }

    /// A key an update makes `manual`, before and after.
    enum Note {
        static let automatic = Key<String>("note", default: "", availability: .all, policy: .automaticSmall)
        static let manual = Key<String>("note", default: "", availability: .all, policy: .manual)
    }

    /// The phone's store, after `before` ran on it under the app that declares
    /// `note` automatic, opened again under the one that declares it `manual`
    /// on a full disk (the lane pass put off); the disk has room again after,
    /// unless `keepsFull` (then the caller frees it).
    static func phoneUpdatedOnAFullDisk(_ open: (DeviceRole, [any KeyDeclaration]) throws -> SyncStore, vfs: CrashVFS,
                                        keepsFull: Bool = false, before: (SyncStore) async throws -> Void) async throws -> SyncStore {
        let phone = try open(.phone, [Note.automatic])
        try await before(phone)
        phone.close()
        vfs.setDiskFull(true)
        defer { if !keepsFull { vfs.setDiskFull(false) } }
        let updated = try open(.phone, [Note.manual])
        #expect(try updated.entryInfo(forKey: Note.manual.name)?.lane == .automatic, "moved on a full disk")
        return updated
    }

    /// Once a tick ran the put-off pass, the change waits for `sync()`, then goes.
    static func expectHeldUntilSync(_ link: Link, _ phone: SyncStore, _ watch: SyncStore) throws {
        link.run(link.a.tick(now: link.now + 1_000), [])
        #expect(try phone.entryInfo(forKey: Note.manual.name)?.lane == .manual)
        link.settle()
        #expect(try watch.entryInfo(forKey: Note.manual.name) == nil, "went without sync()")
        #expect(try phone.requestManualSync() == 1)
        link.settle()
        #expect(try watch.storedValue(for: Note.manual) == "draft")
    }

    /// The update that makes an automatic key `manual` opens on a full disk:
    /// until the put-off pass runs, a change written before it that had not
    /// gone must not go without `sync()` either. The sessions sent it
    /// (fuzz seed 501002081).
    @Test func aFullDiskAtTheUpdateHoldsTheStreamUntilTheMoveRan() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfsHeldStream)
        // No watch met yet: the change has not gone.
        let phone = try await Self.phoneUpdatedOnAFullDisk(open, vfs: Self.vfsHeldStream) { try await $0.set("draft", for: Note.automatic) }
        let watch = try open(.watch, [Note.manual])
        let link = Link(phone, watch)
        link.connect()
        #expect(try watch.entryInfo(forKey: Note.manual.name) == nil, "went without sync() before the pass ran")
        try Self.expectHeldUntilSync(link, phone, watch)
    }

    /// The same when the watch's app was updated first and the phone's
    /// change was passed over: the session read the repair (the changes of
    /// the keys declared alike again) before the put-off pass ran, and sent
    /// it once it had run, without `sync()`.
    @Test func aFullDiskAtTheUpdateHoldsARepairUntilTheMoveRan() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfsHeldRepair)
        let watch = try open(.watch, [Note.manual])
        let phone = try await Self.phoneUpdatedOnAFullDisk(open, vfs: Self.vfsHeldRepair) { phone in
            try await phone.set("draft", for: Note.automatic)
            Link(phone, watch).connect()
            #expect(try watch.entryInfo(forKey: Note.manual.name) == nil, "declared differently: not sent")
        }
        let link = Link(phone, watch)
        link.connect()
        try Self.expectHeldUntilSync(link, phone, watch)
    }

    /// Through the mailbox too: a queued round while the put-off pass still
    /// waits posts none of the stream.
    @Test func aFullDiskAtTheUpdateHoldsTheQueuedStreamUntilTheMoveRan() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfsHeldQueue)
        defer { Self.vfsHeldQueue.setDiskFull(false) }
        let phone = try await Self.phoneUpdatedOnAFullDisk(open, vfs: Self.vfsHeldQueue, keepsFull: true) {
            try await $0.set("draft", for: Note.automatic)
        }
        let secret = PairingSecret.generate()
        let mailbox = try Mailbox(directory: folder.file("mailbox"), role: .phone, secret: secret)
        let peer = SyncPeer(store: phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        _ = try peer.deliverQueued(through: mailbox)
        let posted = try mailbox.outgoingMessages().flatMap { message -> [String] in
            guard case .batch(_, _, _, let entries) = try QueuedMessage(frame: message.frame) else { return [] }
            return entries.map(\.key)
        }
        #expect(!posted.contains(Note.manual.name), "posted without sync() before the pass ran")
    }

    /// A pass tried in vain while the disk was full is tried again at once
    /// after a local write commits (the disk has room again), not only 5 s
    /// after the last try: a queued round right after that write posted
    /// nothing until then (fuzz seed 501602619).
    @Test func aPutOffPassRunsAtOnceAfterALocalCommit() async throws {
        try await Self.expectPutOffPassRuns(vfs: Self.vfsRetried) { phone, _, _ in
            try await phone.set(1, for: Self.retriedCount)
        }
    }

    /// The same after a peer's batch applied: a live session's apply is a
    /// commit too (the disk has room), but only local writes and queued
    /// applies counted, so with only the watch writing the phone's stream
    /// stayed held up to 5 s after room returned.
    @Test func aPutOffPassRunsAtOnceAfterAPeersBatchApplied() async throws {
        try await Self.expectPutOffPassRuns(vfs: Self.vfsRetriedAfterApply) { phone, clock, _ in
            let fromWatch = WireEntry(key: Self.retriedCount.name,
                                      version: HLCTimestamp(physicalMilliseconds: clock.nowMilliseconds(), counter: 0, node: 0x5157),
                                      base: .zero, deleted: false, encoding: "json", value: Array("2".utf8))
            let applied = try phone.applyRemoteBatch([fromWatch], from: .watch)
            #expect(applied == 1)
        }
    }

    /// The same after another process's commit to the file (an app
    /// extension's write), which this store learns of as it looks for them.
    @Test func aPutOffPassRunsAtOnceAfterAnotherProcesssCommit() async throws {
        try await Self.expectPutOffPassRuns(vfs: Self.vfsRetriedAfterOther) { phone, _, openAnother in
            let other = try openAnother()
            defer { other.close() }
            try await other.set(3, for: Self.retriedCount)
            try phone.checkForExternalChanges()
            let seen = try phone.value(for: Self.retriedCount)
            #expect(seen == 3)
        }
    }

    static let vfsSyncRuns = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-sync-runs")
    static let vfsSyncFull = try! CrashVFS.register(name: "syncengine-tests-app-update-lanes-full-sync-full")

    /// `sync()` while the put-off pass still waits (the disk has room again,
    /// nothing committed since): the pass runs first, and this sync releases
    /// the change it moves to the manual lane. It released nothing, and the
    /// change then waited for the next `sync()` (fuzz seed 507802420).
    @Test func aSyncWhileAPutOffPassWaitsRunsItAndReleasesWhatItMoved() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfsSyncRuns)
        let phone = try await Self.phoneUpdatedOnAFullDisk(open, vfs: Self.vfsSyncRuns) { try await $0.set("draft", for: Note.automatic) }
        #expect(phone.lanePassWaits)
        #expect(try phone.requestManualSync() == 1)
        #expect(!phone.lanePassWaits)
        #expect(try phone.entryInfo(forKey: Note.manual.name)?.lane == .released)
        let watch = try open(.watch, [Note.manual])
        Link(phone, watch).connect()
        #expect(try watch.storedValue(for: Note.manual) == "draft")
    }

    /// The same while the disk is still full: `sync()` throws `storageFull`,
    /// as the app's writes do, rather than release nothing and return 0; it
    /// releases the change once there is room.
    @Test func aSyncOnAStillFullDiskWithAPassPutOffThrowsStorageFull() async throws {
        let folder = TempFolder()
        let open = Self.opener(folder, vfs: Self.vfsSyncFull)
        defer { Self.vfsSyncFull.setDiskFull(false) }
        let phone = try await Self.phoneUpdatedOnAFullDisk(open, vfs: Self.vfsSyncFull, keepsFull: true) {
            try await $0.set("draft", for: Note.automatic)
        }
        #expect { try phone.requestManualSync() } throws: { ($0 as? SyncError)?.code == .storageFull }
        #expect(phone.lanePassWaits)
        Self.vfsSyncFull.setDiskFull(false)
        #expect(try phone.requestManualSync() == 1)
        let watch = try open(.watch, [Note.manual])
        Link(phone, watch).connect()
        #expect(try watch.storedValue(for: Note.manual) == "draft")
    }

    static let retriedCount = Key<Int>("count", default: 0, availability: .all, policy: .automaticSmall)

    /// A phone updated on a full disk tries its put-off pass in vain, then
    /// again once there is room but nothing committed since (it still
    /// waits); after `commit` (given the phone, its clock, and a way to open
    /// another store on its file), the next try runs it.
    static func expectPutOffPassRuns(vfs: CrashVFS, after commit: (SyncStore, ManualClock, () throws -> SyncStore) async throws -> Void) async throws {
        let folder = TempFolder()
        let clock = ManualClock()  // never 5 s between two tries
        let open = Self.opener(folder, vfs: vfs, clock: clock)
        defer { vfs.setDiskFull(false) }
        var phone = try open(.phone, [Note.automatic, retriedCount])
        try await phone.set("draft", for: Note.automatic)
        phone.close()
        vfs.setDiskFull(true)
        phone = try open(.phone, [Note.manual, retriedCount])
        let port = SQLiteReplicationPort(phone)
        port.retryDeferredWork()  // tried, in vain
        #expect(port.defersWork)
        vfs.setDiskFull(false)
        port.retryDeferredWork()
        #expect(port.defersWork, "tried again within 5 s of the last try, with nothing committed since")
        try await commit(phone, clock) { try open(.phone, [Note.manual, retriedCount]) }
        port.retryDeferredWork()
        #expect(!port.defersWork, "a commit since the last try: the disk has room")
        #expect(try phone.entryInfo(forKey: Note.manual.name)?.lane == .manual)
    }
}

import Foundation
import Synchronization
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// The WAL is copied into the database file by the background checkpointer
/// (its own connection), not only by the writer once the WAL reaches its
/// inline limit (a 60–150 ms stall of the commit that crosses it).
@Suite struct BackgroundCheckpointTests {
    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    /// A phone store at `folder`'s `store.sqlite`, on a disk with `freeBytes` left
    /// (a machine with little room left would checkpoint early).
    static func store(in folder: TempFolder, freeBytes: Int64 = 1 << 40) throws -> SyncStore {
        var options = StoreOptions(encryption: .keyFile(path: folder.file("store.key")))
        options.freeSpace = { _ in freeBytes }
        return try SyncStore(path: folder.file("store.sqlite"), role: .phone, registry: try TestKeys.registry(), options: options)
    }

    @Test func theWALIsCopiedIntoTheFileInTheBackground() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try Self.store(in: folder)
        defer { store.close() }
        let before = Self.size(path)
        // Single-row commits: well over the WAL frames that schedule a checkpoint
        // (`BackgroundCheckpointer.threshold`), below the 16,000 at which the writer would
        // checkpoint inline even if no checkpoint let the WAL start over (a commit writes about
        // 5.4 pages since schema v10: 3,000 of them reached the inline limit when writes left
        // the background checkpoint no pause to finish in).
        for i in 0..<2_000 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        #expect(Self.size(path + "-wal") > Int(BackgroundCheckpointer.threshold) * 4_096)
        #expect(Self.size(path + "-wal") < Int(BackgroundCheckpointer.inlineLimit) * 4_096)
        store.waitForBackgroundCheckpoints()
        #expect(Self.size(path) >= before + 100_000, "the database file is still \(Self.size(path)) bytes (\(before) at first)")
    }

    /// While commits come faster than a checkpoint completes, the WAL does not
    /// start over, and every commit past the threshold scheduled another
    /// checkpoint at once: hundreds (two fsyncs each) for 1,200 commits. Now
    /// one starts at least `minimumInterval` after the last one ended; the
    /// commits of the last interval are still copied.
    @Test func aBurstOfCommitsIsNotCheckpointedAfterEachOne() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try Self.store(in: folder)
        defer { store.close() }
        let sizeBefore = Self.size(path)
        // Past the threshold (about 5.4 pages a commit), below the inline limit.
        for i in 0..<800 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        let start = ContinuousClock.now
        let runsBefore = store.database.backgroundCheckpointRuns
        for i in 800..<2_000 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        let runs = store.database.backgroundCheckpointRuns - runsBefore
        let elapsed = ContinuousClock.now - start
        #expect(store.database.backgroundCheckpointRuns >= 1, "no background checkpoint started during the commits")
        #expect(runs <= Int(elapsed / BackgroundCheckpointer.minimumInterval) + 2,
                "\(runs) background checkpoints in \(elapsed) of commits")
        store.waitForBackgroundCheckpoints()
        #expect(Self.size(path) >= sizeBefore + 100_000, "the database file is \(Self.size(path)) bytes (\(sizeBefore) at first)")
        #expect(try store.storedValue(for: TestKeys.daily["d1999"]) == 1_999)
    }

    /// On a nearly full disk the WAL is copied into the file from
    /// `lowSpaceThreshold` pages on, not at 4,000: the same 2,000 single-row
    /// commits leave it at 1.3 MB (it reached 44 MB, and filled a
    /// watch with less room than that before its data did).
    @Test func aNearlyFullDiskCheckpointsEarly() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try Self.store(in: folder, freeBytes: 10 << 20)
        defer { store.close() }
        for i in 0..<2_000 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        store.waitForBackgroundCheckpoints()
        #expect(Self.size(path + "-wal") < 1_000 * 4_096, "the WAL is \(Self.size(path + "-wal")) bytes")
        #expect(try store.storedValue(for: TestKeys.daily["d1999"]) == 1_999)
    }

    /// A phone store at `folder`'s `store.sqlite` whose idle trim looks
    /// `idleDelay` after a checkpoint, on a disk with `freeBytes` left.
    static func trimmingStore(in folder: TempFolder, idleDelay: Duration,
                              freeBytes: @escaping @Sendable () -> Int64 = { 1 << 40 }) throws -> SyncStore {
        var options = StoreOptions(encryption: .keyFile(path: folder.file("store.key")))
        options.walTrimIdleDelay = idleDelay
        options.freeSpace = { _ in freeBytes() }
        return try SyncStore(path: folder.file("store.sqlite"), role: .phone, registry: try TestKeys.registry(), options: options)
    }

    /// `rows` rows in one transaction: a WAL file of about 17.6 MB for
    /// 150,000, over the steady state's (`Database.idleWALSizeLimit`), under
    /// `Database.walSizeLimit`.
    static func growTheWAL(of store: SyncStore, rows: Int = 150_000) throws {
        let rows = (0..<rows).map { BackendWrite(key: TestKeys.daily["d\($0)"].name, bytes: Array("\($0)".utf8)) }
        try store.commit(rows)
    }

    /// A WAL that grew past its steady state (one large transaction here) is
    /// not cut back by the next commit, which starts it over: cutting it frees
    /// its blocks in the committing thread, which stalled an app's write for
    /// 12–70 ms on a disk mounted with `discard` (the commit cut it to 16 MB
    /// before). It is cut back to nothing once no commit landed between two
    /// looks of the idle trim; it kept its largest size on disk (44 MB after
    /// 300,000 rows) while the store stayed open before the trim.
    @Test func aGrownWALIsCutBackWhenIdleNotByTheNextCommit() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        // The trim's own timer never fires within the test: its looks are taken by hand.
        let store = try Self.trimmingStore(in: folder, idleDelay: .seconds(3_600))
        defer { store.close() }
        try Self.growTheWAL(of: store)
        let grown = Self.size(path + "-wal")
        #expect(grown > Database.idleWALSizeLimit)
        #expect(grown <= Database.walSizeLimit)
        store.waitForBackgroundCheckpoints()
        try store.setNow(1, for: TestKeys.steps)
        #expect(Self.size(path + "-wal") == grown, "the commit that started the WAL over cut it to \(Self.size(path + "-wal")) bytes")
        #expect(!store.database.trimWALIfIdleNow(), "a commit landed since the trim last looked: the store is not idle")
        #expect(Self.size(path + "-wal") == grown)
        #expect(store.database.trimWALIfIdleNow(), "no commit since the last look: the WAL is cut back")
        #expect(Self.size(path + "-wal") == 0)
        #expect(store.database.walTrims == 1)
        #expect(try store.storedValue(for: TestKeys.daily["d149999"]) == 149_999)
        #expect(try store.storedValue(for: TestKeys.steps) == 1)
        try store.setNow(2, for: TestKeys.steps)
        #expect(try store.storedValue(for: TestKeys.steps) == 2)
        #expect(!store.database.trimWALIfIdleNow(), "a WAL of the steady state is not cut")
    }

    /// The idle trim runs by itself: a checkpoint schedules its look, and
    /// with no commit since, it cuts the grown WAL back.
    @Test func anIdleStoreCutsItsGrownWALBackByItself() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try Self.trimmingStore(in: folder, idleDelay: .milliseconds(20))
        defer { store.close() }
        let trims = store.database.walTrimEvents
        try Self.growTheWAL(of: store)
        try await first(of: trims, "the idle trim of the grown WAL")
        #expect(Self.size(path + "-wal") == 0)
        #expect(try store.storedValue(for: TestKeys.daily["d149999"]) == 149_999)
    }

    /// The cut goes in steps of at most `trimStepBytes`, each under a hold
    /// of the writer's lock of its own: a commit between two steps goes
    /// through at once, and stops the cut until the store is idle again.
    /// (Cut in one truncate, the whole WAL's blocks were freed under the
    /// writer's lock: 10–20 ms for 48–64 MB on a disk mounted with `discard`,
    /// and any write that came in waited that long.)
    @Test func aCommitBetweenTwoStepsOfTheCutGoesThroughAndPutsTheRestOff() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try Self.trimmingStore(in: folder, idleDelay: .seconds(3_600))
        defer { store.close() }
        try Self.growTheWAL(of: store, rows: 200_000)
        let grown = Self.size(path + "-wal")
        store.waitForBackgroundCheckpoints()
        try store.setNow(1, for: TestKeys.steps)
        #expect(!store.database.trimWALIfIdleNow(), "a commit since the last look")
        var sizes: [Int] = []
        var wrote = false
        let cut = store.database.trimWALIfIdleNow(betweenSteps: {
            sizes.append(Self.size(path + "-wal"))
            guard sizes.count == 1 else { return }
            // The writer's lock is free between two steps: no wait, no busy error.
            wrote = (try? store.setNow(2, for: TestKeys.steps)) != nil
        })
        #expect(wrote)
        #expect(!cut, "a commit between two steps puts the rest of the cut off")
        let step = Int(BackgroundCheckpointer.trimStepBytes)
        #expect(sizes == [grown - step], "from \(grown)")
        // Still over the steady state's size: the next idle look cuts the rest.
        #expect(Self.size(path + "-wal") == grown - step)
        #expect(grown - step > Database.idleWALSizeLimit)
        #expect(try store.storedValue(for: TestKeys.steps) == 2)
        // The step that found the commit counts as a look: no commit since, so the next look cuts.
        #expect(store.database.trimWALIfIdleNow(), "idle again: the cut goes on")
        #expect(Self.size(path + "-wal") == 0)
        #expect(store.database.walTrims == 1)
        #expect(try store.storedValue(for: TestKeys.steps) == 2)
        #expect(try store.storedValue(for: TestKeys.daily["d199999"]) == 199_999)
    }

    /// Writes that come and go while the idle trim looks every 2 ms: cuts
    /// start on the timer's queue, commits put them off, and they go on. No
    /// write is lost, and the file opens whole. (A race: run it many times
    /// in release with the other core busy.)
    @Test func writesComingAndGoingWhileTheTrimCutsLoseNothing() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        var random = SeededRandom(seed: UInt64.random(in: 1...UInt64.max))
        var written: [Int: Int] = [:]
        do {
            let store = try Self.trimmingStore(in: folder, idleDelay: .milliseconds(2))
            defer { store.close() }
            for round in 0..<3 {
                try Self.growTheWAL(of: store, rows: 180_000)
                for i in 0..<400 {
                    let value = round * 1_000 + i
                    try store.setNow(value, for: TestKeys.daily["w\(i % 97)"])
                    written[i % 97] = value
                    // Now and then a few milliseconds without a commit (cached reads): the trim's looks find it idle.
                    if random.nextInt(in: 0...7) == 0 {
                        for _ in 0..<random.nextInt(in: 1_000...60_000) { _ = try store.value(for: TestKeys.steps) }
                    }
                    if i % 100 == 99 { await Task.yield() }
                }
            }
            #expect(store.database.walTrimSteps > 0, "no step of a cut ran while the writes came and went")
            store.waitForBackgroundCheckpoints()
            // Whatever the timer left, two looks by hand finish: the first may see the last commit.
            _ = store.database.trimWALIfIdleNow()
            _ = store.database.trimWALIfIdleNow()
            #expect(Self.size(path + "-wal") <= Database.idleWALSizeLimit)
            for (i, value) in written { #expect(try store.storedValue(for: TestKeys.daily["w\(i)"]) == value, "w\(i)") }
        }
        #expect(try RawDatabase(path: path).strings("PRAGMA integrity_check") == ["ok"])
        let reopened = try Self.trimmingStore(in: folder, idleDelay: .seconds(3_600))
        defer { reopened.close() }
        for (i, value) in written { #expect(try reopened.storedValue(for: TestKeys.daily["w\(i)"]) == value, "w\(i)") }
        #expect(try reopened.storedValue(for: TestKeys.daily["d179999"]) == 179_999)
    }

    /// On a nearly full disk the grown WAL is cut back at the trim's next
    /// look even while commits keep coming: the room matters more there.
    @Test func aNearlyFullDiskCutsAGrownWALBackWithoutWaitingForIdle() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let free = Atomic<Int64>(1 << 40)
        let store = try Self.trimmingStore(in: folder, idleDelay: .seconds(3_600), freeBytes: { free.load(ordering: .relaxed) })
        defer { store.close() }
        try Self.growTheWAL(of: store)
        store.waitForBackgroundCheckpoints()
        free.store(10 << 20, ordering: .relaxed)
        // Past `lowSpaceThreshold` pages, where the writer looks at the free space.
        for i in 0..<200 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        #expect(Self.size(path + "-wal") > Database.idleWALSizeLimit)
        #expect(store.database.trimWALIfIdleNow(), "commits came since the last look, but the disk is nearly full")
        #expect(Self.size(path + "-wal") == 0)
        #expect(try store.storedValue(for: TestKeys.daily["d199"]) == 199)
    }
}

/// Power cuts while the background checkpointer copies the WAL into the
/// file (the crash VFS drops every write not synced when the cut lands):
/// every commit that was on stable storage before the cut is there after it,
/// and the file is intact.
@Suite(.serialized, .timeLimit(.minutes(5))) struct CheckpointPowerCutTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-crash-checkpoint")

    /// A round's start: the power on, no cut armed, a new folder (kept by the
    /// caller), the store's path in it and a registry of `TestKeys.daily`.
    static func freshRound(_ vfs: CrashVFS) throws -> (folder: TempFolder, path: String, registry: KeyRegistry) {
        vfs.disarm()
        vfs.powerOn()
        let folder = TempFolder()
        return (folder, folder.file("store.sqlite"), try KeyRegistry([TestKeys.daily]))
    }

    /// A store through `vfs` whose idle trim looks only when a test takes its look by hand.
    static func manualTrimOptions(_ vfs: CrashVFS) -> StoreOptions {
        var options = powerCutOptions(vfs: vfs)
        options.walTrimIdleDelay = .seconds(3_600)
        return options
    }

    @Test func aPowerCutDuringCheckpointsLosesNoSyncedCommit() async throws {
        let vfs = Self.vfs
        var random = SeededRandom(seed: UInt64.random(in: 1...UInt64.max))
        var cutsDuringCheckpoints = 0
        for _ in 0..<6 {
            let (folder, path, registry) = try Self.freshRound(vfs)
            defer { withExtendedLifetime(folder) {} }
            let options = powerCutOptions(vfs: vfs)
            var synced = 0
            do {
                let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
                defer { store.close() }
                for i in 0..<12_000 {
                    if i % 500 == 0 { await Task.yield() }  // a long synchronous loop: let the tests beside it run
                    if i == 6_000 { vfs.armPowerCut(afterOperations: random.nextInt(in: 1...3_000)) }
                    guard (try? store.setNow(i, for: TestKeys.daily["d\(i)"])) != nil else { break }
                    if i % 250 == 249 {
                        guard (try? store.syncCommitted()) != nil else { break }
                        synced = i + 1
                    }
                    if !vfs.statistics.isPowered { break }
                }
                if BackgroundCheckpointTests.size(path) > 4_096 { cutsDuringCheckpoints += 1 }
                vfs.powerCut()
            }
            vfs.powerOn()
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: powerCutOptions())
            defer { store.close() }
            for i in 0..<synced { #expect(try store.storedValue(for: TestKeys.daily["d\(i)"]) == i, "d\(i) of \(synced) synced") }
        }
        #expect(cutsDuringCheckpoints > 0, "no background checkpoint ran before a cut")
    }

    /// No truncate of the idle trim takes more than `trimStepBytes` off the
    /// WAL file: the cut of a grown WAL, which frees its blocks under the
    /// writer's lock, goes in steps (the crash VFS records the largest
    /// truncate it saw). Before, one truncating checkpoint cut 17.6 MB at once.
    @Test func theIdleTrimNeverTruncatesMoreThanAStepAtOnce() async throws {
        // A VFS of its own: its largest truncate is this test's alone.
        let vfs = try CrashVFS.register(name: "syncengine-tests-crash-trim-steps")
        let (folder, path, registry) = try Self.freshRound(vfs)
        defer { withExtendedLifetime(folder) {} }
        let store = try SyncStore(path: path, role: .phone, registry: registry, options: Self.manualTrimOptions(vfs))
        defer { store.close() }
        try BackgroundCheckpointTests.growTheWAL(of: store)
        store.waitForBackgroundCheckpoints()
        try store.setNow(1, for: TestKeys.daily["late"])
        #expect(!store.database.trimWALIfIdleNow(), "commits since the last look")
        let grown = BackgroundCheckpointTests.size(path + "-wal")
        #expect(grown > Database.idleWALSizeLimit)
        #expect(store.database.trimWALIfIdleNow())
        let largest = vfs.statistics.largestTruncation
        #expect(largest > 0 && largest <= Int(BackgroundCheckpointer.trimStepBytes),
                "the largest truncate took \(largest) bytes off a \(grown)-byte WAL")
        #expect(try store.storedValue(for: TestKeys.daily["d149999"]) == 149_999)
        #expect(try store.storedValue(for: TestKeys.daily["late"]) == 1)
    }

    /// The process dies part-way through the cut (the kernel keeps every
    /// write): the WAL left is a prefix of one that held two commits of the
    /// same rows, both already copied into the file. A recovery that read
    /// that prefix would replay the first commit's pages over the file,
    /// which holds the second's; the cut clears the WAL's header first
    /// (synced), so the store opens with the second commit's values.
    @Test func aProcessKilledPartWayThroughTheCutOpensWithTheNewestValues() async throws {
        let vfs = Self.vfs
        let (folder, path, registry) = try Self.freshRound(vfs)
        defer { withExtendedLifetime(folder) {} }
        let options = Self.manualTrimOptions(vfs)
        let rows = 80_000
        var steps = 0
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            defer { store.close() }
            // Two commits of the same rows in one WAL: the first (about 9.4 MB) stays under the
            // background checkpoint's threshold, so the second follows it instead of starting over.
            for round in 1...2 {
                try store.commit((0..<rows).map { BackendWrite(key: TestKeys.daily["d\($0)"].name, bytes: Array("\(round * 1_000_000 + $0)".utf8)) })
            }
            try store.syncCommitted()
            store.waitForBackgroundCheckpoints()
            #expect(BackgroundCheckpointTests.size(path + "-wal") > Database.idleWALSizeLimit)
            // The first look finds the commits since the checkpoint's (if one ran after the second commit).
            for _ in 0..<2 where steps == 0 {
                _ = store.database.trimWALIfIdleNow(betweenSteps: {
                    steps += 1
                    // Three steps into the second commit's frames, the last in the file.
                    guard steps == 3 else { return }
                    _ = vfs.writeBack()
                    _ = vfs.powerCut()
                })
            }
        }
        #expect(steps == 3, "the kill landed in the cut")
        vfs.powerOn()
        let store = try SyncStore(path: path, role: .phone, registry: registry, options: powerCutOptions())
        defer { store.close() }
        for i in [0, 1, rows / 2, rows - 1] {
            #expect(try store.storedValue(for: TestKeys.daily["d\(i)"]) == 2_000_000 + i, "d\(i)")
        }
    }

    /// A power cut inside the idle trim (the WAL copied into the file and
    /// synced, started over, its header cleared and synced, then its file
    /// cut in steps) loses no synced commit, and the store opens whole.
    @Test func aPowerCutDuringTheIdleTrimLosesNoSyncedCommit() async throws {
        let vfs = Self.vfs
        var random = SeededRandom(seed: UInt64.random(in: 1...UInt64.max))
        var cutsInsideTheTrim = 0
        for round in 0..<8 {
            let (folder, path, registry) = try Self.freshRound(vfs)
            defer { withExtendedLifetime(folder) {} }
            let options = Self.manualTrimOptions(vfs)
            do {
                let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
                defer { store.close() }
                try BackgroundCheckpointTests.growTheWAL(of: store)
                store.waitForBackgroundCheckpoints()
                for i in 0..<20 { try store.setNow(i, for: TestKeys.daily["late\(i)"]) }
                try store.syncCommitted()
                #expect(BackgroundCheckpointTests.size(path + "-wal") > Database.idleWALSizeLimit)
                #expect(!store.database.trimWALIfIdleNow(), "commits since the last look")
                // The first round cuts at the trim's first write, truncate or sync; the others at
                // random, across its steps (a header write, a sync and about 18 truncates).
                vfs.armPowerCut(afterOperations: round == 0 ? 1 : random.nextInt(in: 1...24))
                _ = store.database.trimWALIfIdleNow()
                if !vfs.statistics.isPowered { cutsInsideTheTrim += 1 }
                vfs.powerCut()
            }
            vfs.powerOn()
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: powerCutOptions())
            defer { store.close() }
            for i in [0, 1, 75_000, 149_998, 149_999] {
                #expect(try store.storedValue(for: TestKeys.daily["d\(i)"]) == i, "d\(i), round \(round)")
            }
            for i in 0..<20 { #expect(try store.storedValue(for: TestKeys.daily["late\(i)"]) == i, "late\(i), round \(round)") }
        }
        #expect(cutsInsideTheTrim > 0, "no power cut landed inside the trim")
    }
}

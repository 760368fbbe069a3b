import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

private func columns(_ path: String, _ table: String) throws -> [String] {
    var handle: OpaquePointer?
    guard sqlite3_open(path, &handle) == SQLITE_OK, let db = handle else { throw SyncError(.database, "cannot open \(path)") }
    defer { sqlite3_close(db) }
    var stmt: OpaquePointer?
    sqlite3_prepare_v2(db, "PRAGMA table_info(\(table))", -1, &stmt, nil)
    defer { sqlite3_finalize(stmt) }
    var names: [String] = []
    while sqlite3_step(stmt) == SQLITE_ROW { names.append(String(cString: sqlite3_column_text(stmt, 1))) }
    return names
}

/// A store file whose numbers were damaged (a bit flip, a bad tool, a bug
/// of an older build) that SQLite itself finds sound: a size, a sequence, a
/// cursor or a time at the ends of Int64 trapped on arithmetic.
@Suite(.timeLimit(.minutes(8))) struct DamagedNumbersTests {
    /// A phone (with a large value, a tombstone, an encrypted key and a
    /// conflict log) synced with its watch, both closed; the files of both.
    private func syncedPair() async throws -> Pair {
        let pair = try Pair()
        try await pair.phone.set(3, for: TestKeys.steps)
        try await pair.phone.set("Ada", for: TestKeys.name)
        try await pair.phone.set(["a"], for: TestKeys.tags)
        try await pair.phone.set("s3cret", for: TestKeys.secret)
        try await pair.phone.set(7, for: TestKeys.daily["x"])
        try await pair.phone.set(Data(repeating: 5, count: 150_000), for: TestKeys.blob)
        try await pair.phone.remove(TestKeys.daily["x"])
        try pair.phone.requestManualSync()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        try await pair.phone.set(4, for: TestKeys.steps)
        return pair
    }

    private func open(_ path: String, _ role: DeviceRole, key: String, clock: ManualClock = ManualClock()) throws -> SyncStore {
        try SyncStore(path: path, role: role, registry: try TestKeys.registry(),
                      options: StoreOptions(clock: clock, encryption: .keyFile(path: key)))
    }

    /// `pair`'s store of `role` closed, `sql` run on its file, and the store opened again.
    private func reopened(_ pair: Pair, _ role: DeviceRole, after sql: String) throws -> SyncStore {
        let name = role == .phone ? "phone" : "watch"
        (role == .phone ? pair.phone : pair.watch).close()
        try rawSQL(pair.folder.file("\(name).sqlite"), sql)
        return try open(pair.folder.file("\(name).sqlite"), role, key: pair.folder.file("\(name).key"),
                        clock: role == .phone ? pair.phoneClock : pair.watchClock)
    }

    /// A session between `phone` and `watch` until quiet; whether neither side failed.
    private func syncs(_ phone: SyncStore, _ watch: SyncStore) -> Bool {
        let link = Link(phone, watch)
        link.connect()
        link.settle()
        return link.a.failure == nil && link.b.failure == nil
    }

    @Test func aChangeSequenceAtTheEndOfInt64IsNumberedAfreshAndTheStoreSyncs() async throws {
        let pair = try await syncedPair()
        // It trapped at open: the next sequence overflowed.
        let phone = try reopened(pair, .phone, after: "UPDATE entries SET change_seq = 9223372036854775807 WHERE key = 'health:daily:steps'")
        #expect(try phone.entryInfo(forKey: TestKeys.steps.name).map { $0.changeSequence < Int64(1) << 62 } == true)
        try await phone.set("5", for: TestKeys.units)
        #expect(syncs(phone, pair.watch))
        #expect(try await pair.watch.get(TestKeys.steps) == 4)
        #expect(try await pair.watch.get(TestKeys.units) == "5")
        phone.close()
    }

    @Test func aNegativeCursorStartsOverAndTheStoreSyncs() async throws {
        let pair = try await syncedPair()
        // It trapped when the watch's receipt encoded the cursor.
        let watch = try reopened(pair, .watch, after: "UPDATE sync_peers SET acked_through = -1")
        try await watch.set(9, for: TestKeys.daily["w"])
        #expect(syncs(pair.phone, watch))
        #expect(try await watch.get(TestKeys.steps) == 4)
        #expect(try await pair.phone.get(TestKeys.daily["w"]) == 9)
        watch.close()
    }

    @Test func aSizeOrATimeAtTheEndOfInt64NeverOverflows() async throws {
        let pair = try await syncedPair()
        // Sizes were added up as the stream was read; a pending change's age was now minus its time.
        let phone = try reopened(pair, .phone, after: "UPDATE entries SET size = -9223372036854775808, written_at = -9223372036854775808")
        #expect(try phone.pendingSummary().oldestPendingAgeMilliseconds == Int64.max)
        _ = syncs(phone, pair.watch)
        #expect(try await pair.watch.get(TestKeys.steps) == 4)
        phone.close()
    }

    /// Every number of every row set to an extreme, on the phone's file and
    /// then on the watch's: each store opens or throws a clear error, and
    /// reads, writes and a session with the other never trap.
    @Test(arguments: [DeviceRole.phone, .watch])
    func anyColumnAtAnExtremeGivesAClearErrorOrWorks(damaged role: DeviceRole) async throws {
        let pair = try await syncedPair()
        pair.phone.close()
        pair.watch.close()
        let damagedName = role == .phone ? "phone" : "watch", otherName = role == .phone ? "watch" : "phone"
        var updates: [String] = []
        for table in ["entries", "sync_peers", "sync_chunks", "sync_conflicts", "sync_rebaseline_marks", "sync_forgotten_peers"] {
            for column in try columns(pair.folder.file("\(damagedName).sqlite"), table) {
                for value in ["-1", "-9223372036854775808", "9223372036854775807", "'text'", "x'00ff'", "NULL"] {
                    updates.append("UPDATE \(table) SET \(column) = \(value)")
                }
            }
        }
        for name in ["node_id", "role", "salt", "at_rest_verifier", "purged_through", "purge_marks", "value_directory"] {
            for value in ["'-1'", "'9223372036854775807'", "'[{\"at\":-9223372036854775808,\"cursors\":[]}]'", "x'00ff'"] {
                updates.append("UPDATE sync_meta SET value = \(value) WHERE name = '\(name)'")
            }
        }
        var opened = 0
        for (n, update) in updates.enumerated() {
            // Hundreds of short synchronous cases: let other tests' tasks run between them
            // (the cooperative pool has one thread per core).
            await Task.yield()
            let case_ = TempFolder()
            for (name, file) in [(damagedName, "d"), (otherName, "o")] {
                for suffix in ["", "-wal"] {
                    try? FileManager.default.copyItem(atPath: pair.folder.file("\(name).sqlite\(suffix)"), toPath: case_.file("\(file).sqlite\(suffix)"))
                }
                try FileManager.default.copyItem(atPath: pair.folder.file("\(name).key"), toPath: case_.file("\(file).key"))
            }
            guard (try? rawSQL(case_.file("d.sqlite"), update)) != nil else { continue }  // a constraint refused it
            do {
                let damaged = try open(case_.file("d.sqlite"), role, key: case_.file("d.key"))
                opened += 1
                _ = try? damaged.allEntryInfo()
                _ = try? await damaged.get(TestKeys.steps)
                _ = try? await damaged.get(TestKeys.secret)
                _ = try? damaged.pendingSummary()
                _ = try? await damaged.set(n, for: TestKeys.daily["n"])
                let other = try open(case_.file("o.sqlite"), role.counterpart, key: case_.file("o.key"))
                let link = Link(damaged, other)
                link.connect()
                link.settle()
                _ = try? damaged.purgeTombstones()
                damaged.close()
                other.close()
            } catch {
                #expect(error is SyncError, "\(update): \(error)")
            }
        }
        #expect(opened > updates.count / 2)
    }
}

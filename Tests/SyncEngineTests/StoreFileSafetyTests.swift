import CSQLite
import Foundation
@testable import SyncEngine
import Testing

/// Key files and store files are never replaced or adopted by mistake, and a
/// damaged store is never written to.
@Suite(.timeLimit(.minutes(5))) struct StoreFileSafetyTests {
    // MARK: key files

    @Test func aMissingKeyFileOfAStoreWithEncryptedValuesIsReportedAndNotCreated() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let path = folder.file("s.sqlite")
        let keyFile = folder.file("master.key")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
            try await store.set("sealed", for: TestKeys.secret)
            store.close()
        }
        let original = try #require(FileManager.default.contents(atPath: keyFile))
        try FileManager.default.removeItem(atPath: keyFile)
        let before = try Self.bytes(path)
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .encryptionKeyMissing && error.message.contains("nothing was created")
        }
        #expect(!FileManager.default.fileExists(atPath: keyFile))
        #expect(try Self.bytes(path) == before)

        // Another, existing key: wrong, and nothing changes either.
        let other = folder.file("other.key")
        _ = FileManager.default.createFile(atPath: other, contents: Data(repeating: 7, count: 32), attributes: [.posixPermissions: 0o600])
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: other)))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyWrong }
        #expect(FileManager.default.contents(atPath: other) == Data(repeating: 7, count: 32))

        // The original key back: everything reads.
        _ = FileManager.default.createFile(atPath: keyFile, contents: original, attributes: [.posixPermissions: 0o600])
        let again = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
        #expect(try await again.get(TestKeys.secret) == "sealed")

        // A new store still gets a new key file, mode 0600.
        let fresh = folder.file("fresh.key")
        _ = try SyncStore(path: folder.file("new.sqlite"), role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: fresh)))
        #expect(try FileManager.default.attributesOfItem(atPath: fresh)[.posixPermissions] as? Int == 0o600)
    }

    @Test func aKeyFileOthersMayReadIsRefused() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let path = folder.file("s.sqlite")
        let keyFile = folder.file("master.key")
        _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
        let key = try #require(FileManager.default.contents(atPath: keyFile))
        for mode in [0o644, 0o640, 0o604, 0o660] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: keyFile)
            #expect {
                _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
            } throws: { error in
                guard let error = error as? SyncError else { return false }
                return error.code == .keyFile && error.message.contains("chmod 600")
            }
            #expect(FileManager.default.contents(atPath: keyFile) == key)
        }
        // Not a regular file.
        let directory = folder.file("dir.key")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        #expect {
            _ = try SyncStore(path: folder.file("d.sqlite"), role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: directory)))
        } throws: { ($0 as? SyncError)?.code == .keyFile }
        // chmod 600 fixes it.
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile)
        _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
    }

    // MARK: application_id

    @Test func anotherProgramsSQLiteFileIsRefusedUntouched() throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        // Without an application_id, in rollback-journal mode.
        let notes = folder.file("notes.sqlite")
        try Self.sqlite(notes, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('hello'), ('world')")
        // With another program's application_id, in WAL mode.
        let other = folder.file("other.sqlite")
        try Self.sqlite(other, "PRAGMA application_id = 305419896; PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1)")
        // Our tables but a schema version of 0: not a store we made.
        let lookalike = folder.file("lookalike.sqlite")
        try Self.sqlite(lookalike, "CREATE TABLE sync_meta(name TEXT PRIMARY KEY, value TEXT)")
        for path in [notes, other, lookalike] {
            let before = try Self.bytes(path)
            let siblings = try Self.siblings(folder)
            #expect {
                _ = try SyncStore(path: path, role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
            } throws: { error in
                guard let error = error as? SyncError else { return false }
                return error.code == .notADatabase && error.message.contains("not a SyncEngine store") && error.message.contains("left untouched")
            }
            #expect(try Self.bytes(path) == before, "\(path) changed")
            #expect(try Self.siblings(folder) == siblings, "files appeared beside \(path)")
        }
        #expect(try Self.sqliteInt(notes, "SELECT count(*) FROM sqlite_master WHERE name = 'entries'") == 0)
    }

    @Test func newEmptyAndOlderStoresGetTheApplicationID() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        // New file, empty file, and a SQLite file with no schema yet.
        let new = folder.file("new.sqlite")
        let empty = folder.file("empty.sqlite")
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        let blank = folder.file("blank.sqlite")
        try Self.sqlite(blank, "PRAGMA page_size = 8192; VACUUM")
        for path in [new, empty, blank] {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try await store.set(1, for: TestKeys.steps)
            store.close()
            #expect(try Self.sqliteInt(path, "PRAGMA application_id") == Int64(Schema.applicationID))
        }
        // A store made before the id (application_id 0): it opens, keeps its data and gets the id.
        try Self.sqlite(new, "PRAGMA application_id = 0")
        #expect(try Self.sqliteInt(new, "PRAGMA application_id") == 0)
        let older = try SyncStore(path: new, role: .phone, registry: registry, options: options)
        #expect(try await older.get(TestKeys.steps) == 1)
        #expect(try Self.sqliteInt(new, "PRAGMA application_id") == 0x5379_456E)
    }

    // MARK: damaged files

    @Test func aDamagedPageIsFoundAtOpenAndTheFileLeftUntouched() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        let path = folder.file("s.sqlite")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try store.batchNow { batch in
                for i in 0..<400 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            }
            store.close()
        }
        let healthy = try Self.bytes(path)
        try Self.damage(path, table: "entries")
        let damaged = try Self.bytes(path)
        for _ in 0..<2 {
            #expect {
                _ = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            } throws: { error in
                guard let error = error as? SyncError else { return false }
                return error.code == .databaseCorrupt && error.message.contains("will not write to it again")
            }
            #expect(try Self.bytes(path) == damaged)
        }
        // A good copy restored at the same path (a new file) opens again.
        let restored = folder.file("restored")
        _ = FileManager.default.createFile(atPath: restored, contents: healthy)
        try? FileManager.default.removeItem(atPath: path + "-wal")
        try? FileManager.default.removeItem(atPath: path + "-shm")
        #expect(rename(restored, path) == 0)
        let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try await store.get(TestKeys.daily["d7"]) == 7)
    }

    @Test func damageFoundByAStatementStopsEveryWrite() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        var options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        options.quickCheckMaxBytes = nil  // only statements find it
        options.externalChangePollInterval = nil
        let path = folder.file("s.sqlite")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            try await store.set(1, for: TestKeys.steps)
            store.close()
        }
        // A table opening the store does not read: the conflict log.
        try Self.sqlite(path, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20) "
                        + "INSERT INTO sync_conflicts(key, local_ver, local_node, remote_ver, remote_node, winner, rule, resolved_at) "
                        + "SELECT 'k' || i, 1, 1, 2, 2, 'remote', 'last-writer-wins', 0 FROM n")
        try Self.damage(path, table: "sync_conflicts")
        let damaged = try Self.bytes(path)
        do {
            let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
            #expect(try await store.get(TestKeys.steps) == 1)
            #expect { _ = try store.conflictLog() } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
            // From now on every write path refuses, before touching the file.
            await #expect { try await store.set(2, for: TestKeys.steps) } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
            #expect { try store.requestManualSync() } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
            #expect { try store.acknowledge(peer: 9, through: 1) } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
            #expect { _ = try store.applyRemote([], peerRole: .watch, mismatched: []) } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
            // Reads of what is intact still work.
            #expect(try await store.get(TestKeys.steps) == 1)
            store.close()
        }
        // Closing wrote nothing either (no checkpoint), and the process will not open it for writing again.
        #expect(try Self.bytes(path) == damaged)
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
        #expect(try Self.bytes(path) == damaged)
    }

    // MARK: helpers

    static func bytes(_ path: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: path))
    }

    static func siblings(_ folder: TempFolder) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
    }

    /// Runs `sql` with a plain SQLite connection (closed after: the WAL is checkpointed away).
    static func sqlite(_ path: String, _ sql: String) throws {
        let db = try RawDatabase(path: path)
        try db.exec(sql)
    }

    static func sqliteInt(_ path: String, _ sql: String) throws -> Int64 {
        Int64(try RawDatabase(path: path).strings(sql).first ?? "") ?? -1
    }

    /// Overwrites the b-tree header of `table`'s root page (not page 1) with garbage.
    static func damage(_ path: String, table: String) throws {
        let (root, pageSize): (Int64, Int64) = try {
            let db = try RawDatabase(path: path)
            let root = Int64(try db.strings("SELECT rootpage FROM sqlite_master WHERE name = '\(table)'").first ?? "") ?? 0
            let size = Int64(try db.strings("PRAGMA page_size").first ?? "") ?? 0
            return (root, size)
        }()
        let walSize = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        #expect(walSize == 0, "the WAL should be checkpointed away")
        try #require(root > 1 && pageSize > 0)
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64((root - 1) * pageSize))
        try handle.write(contentsOf: Data(repeating: 0xEE, count: 12))
    }
}

/// A store path naming a FIFO: `SyncStore(path:)` (and `syncsim node --db`)
/// waited for ever for a writer while reading the file's header. Now refused
/// at once as no store (`not-a-database`, naming what it is), as `inspect` does.
@Suite(.timeLimit(.minutes(5))) struct StorePathThatIsNoRegularFileTests {
    @Test func aFIFOOrDirectoryIsRefusedAsNoStoreWithoutWaiting() async throws {
        let folder = TempFolder()
        let fifo = folder.file("store.fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let directory = folder.file("store.dir")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let registry = try TestKeys.registry()
        for path in [fifo, directory] {
            let outcome: Result<Void, any Error>
            do {
                outcome = try await withDeadline("the open of \(path) to end") {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
                        Thread.detachNewThread {
                            continuation.resume(returning: Result { try SyncStore(path: path, role: .phone, registry: registry).close() })
                        }
                    }
                }
            } catch {
                // Let a blocked open go (a writer that closes at once: it reads end of file).
                let writer = open(fifo, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
                throw error
            }
            guard case .failure(let error) = outcome else {
                Issue.record("a store opened at \(path)")
                continue
            }
            #expect((error as? SyncError)?.code == .notADatabase && "\(error)".contains("not a regular file"), "\(error)")
        }
        var info = stat()
        #expect(lstat(fifo, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO)
        #expect(!FileManager.default.fileExists(atPath: fifo + "-wal"))
    }
}

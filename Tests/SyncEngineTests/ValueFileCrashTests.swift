import CSQLite
import Foundation
import Logging
@_spi(Benchmarks) @_spi(Testing) @testable import SyncEngine
import Testing

/// A value file written again at its version (a seal at open, a resolver's
/// merge) is staged and renamed after the row commits; a file replaced by a
/// new version is deleted after it. A crash or a power cut between the
/// commit and the file change must lose nothing.
@Suite(.serialized) struct ValueFileCrashTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-value-file-crash")

    static let plainPin = Key<String>("vault:pin", default: "", policy: .never)
    static let sealedPin = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)

    /// Runs `body` as a process that dies right after each COMMIT (its value files unchanged).
    static func crashingAfterCommit<T>(_ valueDirectory: String, _ body: () throws -> T) rethrows -> T {
        ValueFiles.crashAfterCommitForTests.withLock { _ = $0.insert(valueDirectory) }
        defer { ValueFiles.crashAfterCommitForTests.withLock { _ = $0.remove(valueDirectory) } }
        return try body()
    }

    static func fileBytes(_ directory: String) throws -> [[UInt8]] {
        try FileManager.default.contentsOfDirectory(atPath: directory + "/values").map {
            [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/values/" + $0)))
        }
    }

    /// The seal's commit, then a crash before its file was renamed: the next
    /// open read the value as damaged (its sealed file deleted as
    /// unreferenced) and kept the plaintext on disk.
    @Test func aCrashBetweenTheSealsCommitAndItsRenameLosesNothing() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let marker = "PIN-\(UUID().uuidString)"
        let before = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.plainPin]))
        try await before.set(marker, for: Self.plainPin)
        before.close()

        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        try Self.crashingAfterCommit(directory + "/values") {
            try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options).close()
        }
        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options)
        #expect(try await store.get(Self.sealedPin) == marker)
        let files = try Self.fileBytes(directory)
        #expect(files.count == 1)
        #expect(!files.contains { $0.contains(subsequence: Array(marker.utf8)) }, "the plaintext stayed on disk")
        store.close()
        let again = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options)
        #expect(try await again.get(Self.sealedPin) == marker)
        again.close()
    }

    /// Leaves in `directory` the state that crash left before the fix: `marker`
    /// written plain, the key made sealed by an open that crashed after its
    /// commit, the staged (sealed) file deleted as unreferenced (as the open
    /// before the fix did), and neither the notes of staged files nor the
    /// check for plaintext files known (as before the fix).
    static func plaintextFileUnderASealedRow(_ marker: String, directory: String, options: StoreOptions) async throws {
        let before = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([plainPin]))
        try await before.set(marker, for: plainPin)
        before.close()
        try crashingAfterCommit(directory + "/values") {
            try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([sealedPin]), options: options).close()
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: directory + "/values") where name.contains(".tmp-") {
            try FileManager.default.removeItem(atPath: directory + "/values/" + name)
        }
        var db: OpaquePointer?
        #expect(sqlite3_open(directory + "/metadata.sqlite", &db) == SQLITE_OK)
        let sql = "DELETE FROM sync_meta WHERE name = '\(SyncStore.valueFilesResealedMeta)' OR name LIKE '\(ValueFiles.stagedMetaPrefix)%'"
        #expect(sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(db)
    }

    /// The state that crash left before the fix (the row sealed, the file
    /// still the plaintext, the staged file gone): the next open seals the
    /// file again.
    @Test func aPlaintextFileUnderASealedRowIsSealedAgain() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let marker = "PIN-\(UUID().uuidString)"
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        try await Self.plaintextFileUnderASealedRow(marker, directory: directory, options: options)
        #expect(try Self.fileBytes(directory).contains { $0.contains(subsequence: Array(marker.utf8)) }, "the crash's state: plaintext under a sealed row")

        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options)
        #expect(try await store.get(Self.sealedPin) == marker)
        let files = try Self.fileBytes(directory)
        #expect(files.count == 1)
        #expect(!files.contains { $0.contains(subsequence: Array(marker.utf8)) }, "the plaintext stayed on disk")
        store.close()
    }

    /// The same state, but the plaintext file cannot be read at that open (a
    /// directory in its place, which root cannot read either). Before: the
    /// check passed over it and marked itself done, so the file was never
    /// checked again and its plaintext stayed on disk. Now the open logs a
    /// warning, leaves the check unmarked, and the next open seals the file.
    @Test func aPlaintextFileThatCannotBeReadIsCheckedAgainAtTheNextOpen() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let marker = "PIN-\(UUID().uuidString)"
        var options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        try await Self.plaintextFileUnderASealedRow(marker, directory: directory, options: options)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory + "/values")
        #expect(names.count == 1)
        let file = directory + "/values/" + (names.first ?? "")
        let aside = folder.file("aside")
        try FileManager.default.moveItem(atPath: file, toPath: aside)
        try FileManager.default.createDirectory(atPath: file, withIntermediateDirectories: false)

        let (lines, sink) = AsyncStream.makeStream(of: String.self)
        options.logger = Logger(label: "test") { _ in StreamLogHandler(sink: sink, includesMetadata: true) }
        let unreadable = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options)
        #expect(try unreadable.syncStore.meta(SyncStore.valueFilesResealedMeta) == nil, "the check marked itself done though it skipped a file")
        unreadable.close()
        sink.finish()
        var logged: [String] = []
        for await line in lines { logged.append(line) }
        #expect(logged.contains { $0.hasPrefix("warning") && $0.contains("next open") && $0.contains("count=1") }, "\(logged)")

        // The file readable again: the next open checks it, seals it, and marks the check done.
        try FileManager.default.removeItem(atPath: file)
        try FileManager.default.moveItem(atPath: aside, toPath: file)
        options.logger = SyncStore.disabledLogger
        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([Self.sealedPin]), options: options)
        #expect(try await store.get(Self.sealedPin) == marker)
        #expect(!(try Self.fileBytes(directory)).contains { $0.contains(subsequence: Array(marker.utf8)) }, "the plaintext stayed on disk")
        #expect(try store.syncStore.meta(SyncStore.valueFilesResealedMeta) != nil)
        store.close()
    }

    /// A resolver's merge keeps the version: a crash between its commit and
    /// the rename left the row's new size over the old bytes (damaged).
    @Test func aCrashBetweenAMergesCommitAndItsRenameLosesNothing() async throws {
        let folder = TempFolder()
        let directory = folder.file("files")
        let registry = try KeyRegistry([TestKeys.tags])
        let files = try FileValueStore(directory: directory, role: .phone, registry: registry)
        try await files.set(["a"], for: TestKeys.tags)
        let local = try #require(try files.syncStore.entryInfo(forKey: "tags")?.version)
        let concurrent = WireEntry(key: "tags", version: HLCTimestamp(packed: local.packed - 1_000, node: 0x5EED), base: .zero, deleted: false,
                                   encoding: "json", value: Array(try JSONEncoder().encode(["b"])))
        try Self.crashingAfterCommit(directory + "/values") {
            _ = try files.syncStore.applyRemoteBatch([concurrent], from: .watch)
        }
        files.close()
        let reopened = try FileValueStore(directory: directory, role: .phone, registry: registry)
        #expect(try reopened.value(for: TestKeys.tags) == ["a", "b"])
        #expect(try reopened.syncStore.entryInfo(forKey: "tags")?.version == local)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/values").count == 1)
        reopened.close()
    }

    /// A new version's commit (not on stable storage under `.normal`), the
    /// old version's file deleted, then a power cut: the row rolled back to
    /// the old version, whose file was gone.
    @Test func aPowerCutAfterANewVersionKeepsAFileForTheRow() async throws {
        let vfs = Self.vfs
        vfs.powerOn()
        let folder = TempFolder()
        let directory = folder.file("files")
        var options = StoreOptions(clock: ManualClock())
        options.externalChangePollInterval = nil
        options.vfsName = vfs.name
        let registry = try KeyRegistry([TestKeys.blob])
        do {
            let store = try FileValueStore(directory: directory, role: .phone, registry: registry, options: options)
            try await store.set(Data([1, 2, 3]), for: TestKeys.blob)
            vfs.writeBack()
            try await store.set(Data([4, 5, 6, 7]), for: TestKeys.blob)
            vfs.powerCut()
            store.close()
        }
        vfs.powerOn()
        var reopen = StoreOptions()
        reopen.externalChangePollInterval = nil
        let store = try FileValueStore(directory: directory, role: .phone, registry: registry, options: reopen)
        // The commit that deleted the old file was made durable first.
        #expect(try store.value(for: TestKeys.blob) == Data([4, 5, 6, 7]))
        store.close()
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A value file that is there but cannot be read (a directory in its place,
/// no permission) is not a missing file: reads say which file and why
/// (`value-file-unreadable`), and nothing treats the value as absent: no
/// write replaces it, no batch from the peer wins over it unmerged, no
/// session passes it over. Once the file reads again, the value is as it was.
@Suite(.timeLimit(.minutes(5))) struct UnreadableValueFileTests {
    private static func open(_ folder: TempFolder, role: DeviceRole = .phone) throws -> FileValueStore {
        try FileValueStore(directory: folder.file("blobs-\(role)"), role: role, registry: TestKeys.registry(),
                           options: StoreOptions(encryption: .keyFile(path: folder.file("\(role).key"))))
    }

    private static func file(of key: String, in store: FileValueStore) throws -> String {
        let info = try #require(try store.syncStore.entryInfo(forKey: key))
        return store.directory + "/values/" + ValueFiles.fileName(key: key, version: info.version)
    }

    /// Every way the store could treat the unreadable value as absent throws
    /// `value-file-unreadable`, naming the file and the reason.
    private static func expectEveryUseRefused(_ store: FileValueStore, file: String, reason: String) async throws {
        let read = #expect(throws: SyncError.self) { try store.value(for: TestKeys.tags) }
        #expect(read?.code == .valueFileUnreadable)
        #expect(read?.message.contains(file) == true)
        #expect(read?.message.contains(reason) == true)
        #expect(read?.message.contains("missing") == false)

        let write = await #expect(throws: SyncError.self) { try await store.set(["b"], for: TestKeys.tags) }
        #expect(write?.code == .valueFileUnreadable)
        let removal = #expect(throws: SyncError.self) { try store.removeNow(TestKeys.tags) }
        #expect(removal?.code == .valueFileUnreadable)

        // A concurrent write from the watch: the key's resolver must see this value, not take the watch's alone.
        let fromWatch = WireEntry(key: TestKeys.tags.name, version: HLCTimestamp(physicalMilliseconds: SystemClock().nowMilliseconds() + 60_000, counter: 0, node: 7),
                                  base: .zero, deleted: false, encoding: "json", value: Array(#"["w"]"#.utf8))
        let apply = #expect(throws: SyncError.self) { try store.syncStore.applyRemote([fromWatch], peerRole: .watch, mismatched: []) }
        #expect(apply?.code == .valueFileUnreadable)
    }

    /// A directory in place of the value file, which no user (root
    /// included) can read as a file.
    @Test func aDirectoryInPlaceOfAValueFileIsReportedAndTheValueKept() async throws {
        let folder = TempFolder()
        let store = try Self.open(folder)
        defer { store.close() }
        try await store.set(["a"], for: TestKeys.tags)
        let version = try #require(try store.syncStore.entryInfo(forKey: TestKeys.tags.name)).version
        let path = try Self.file(of: TestKeys.tags.name, in: store)
        let aside = folder.file("aside")
        try FileManager.default.moveItem(atPath: path, toPath: aside)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        store.syncStore.cache.invalidateAll()

        try await Self.expectEveryUseRefused(store, file: path, reason: String(cString: strerror(EISDIR)))

        // The file back in its place: the value and its version are as they were.
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.moveItem(atPath: aside, toPath: path)
        store.syncStore.cache.invalidateAll()
        #expect(try store.value(for: TestKeys.tags) == ["a"])
        #expect(try store.syncStore.entryInfo(forKey: TestKeys.tags.name)?.version == version)
    }

    /// A file of mode 000. Root reads it anyway, so this case runs only for
    /// another user; the directory case above covers root.
    @Test(.enabled(if: getuid() != 0, "root reads a file of mode 000; aDirectoryInPlaceOfAValueFileIsReportedAndTheValueKept covers root"))
    func aValueFileWithoutReadPermissionIsReportedAndTheValueKept() async throws {
        let folder = TempFolder()
        let store = try Self.open(folder)
        defer { store.close() }
        try await store.set(["a"], for: TestKeys.tags)
        let path = try Self.file(of: TestKeys.tags.name, in: store)
        #expect(chmod(path, 0) == 0)
        store.syncStore.cache.invalidateAll()

        try await Self.expectEveryUseRefused(store, file: path, reason: String(cString: strerror(EACCES)))

        #expect(chmod(path, 0o600) == 0)
        store.syncStore.cache.invalidateAll()
        #expect(try store.value(for: TestKeys.tags) == ["a"])
    }

    /// A session does not lose a value whose file cannot be read (the peer
    /// acknowledges past it): the error names the file, the change is held,
    /// and once the file reads again the value reaches the watch
    /// (`HeldUnreadableValueTests`: the session goes on meanwhile).
    @Test func aSessionSendsTheValueOnceItsFileReadsAgain() async throws {
        let (pair, phoneFiles) = try Pair.withPhoneValueFiles()
        defer { phoneFiles.close() }
        try await phoneFiles.set(["a"], for: TestKeys.tags)
        try await phoneFiles.set(5, for: TestKeys.steps)
        let path = try Self.file(of: TestKeys.tags.name, in: phoneFiles)
        let aside = try pair.blockValueFile(at: path)
        phoneFiles.syncStore.cache.invalidateAll()

        let events = pair.phone.events()
        try await withConnectedPeers(pair, over: .tcp) { _, _ in
            let error = try await first(of: events, "the phone's error naming the unreadable file") { event in
                if case .error(let error) = event { return error.message.contains(path) }
                return false
            }
            guard case .error(let error) = error else { return }
            #expect(error.code == .valueFileUnreadable)
            try FileManager.default.removeItem(atPath: path)
            try FileManager.default.moveItem(atPath: aside, toPath: path)
            try await eventually(pair.watch, "the tags on the watch once their file reads again") {
                try pair.watch.storedValue(for: TestKeys.tags) == ["a"]
            }
            #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        }
    }
}

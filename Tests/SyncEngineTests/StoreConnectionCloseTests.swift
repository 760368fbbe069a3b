import Foundation
@testable import SyncEngine
import Synchronization
import Testing

/// `close()` closes the store's SQLite connections: the file alone then holds
/// every commit, descriptors are released, and work in flight ends safely.
@Suite(.timeLimit(.minutes(3))) struct StoreConnectionCloseTests {
    private static func registry() throws -> KeyRegistry { try KeyRegistry([TestKeys.steps, TestKeys.name]) }

    /// The process's open descriptors of files in `folder` (other tests running beside open their own).
    private static func openFileDescriptors(in folder: TempFolder) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd))?.hasPrefix(folder.path + "/") ?? false
        }.count
    }

    /// Copying only the `.sqlite` of a closed store (still referenced) gives all its data.
    @Test func aClosedStoresFileAloneHoldsEveryCommit() async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try Self.registry())
        try await store.set(4_321, for: TestKeys.steps)
        try await store.set("Ada", for: TestKeys.name)
        #expect(try store.entryInfo(forKey: "profile:name") != nil)   // a read on a reader connection
        store.close()
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        let copy = TempFolder()
        try FileManager.default.copyItem(atPath: path, toPath: copy.file("phone.sqlite"))
        let reopened = try SyncStore(path: copy.file("phone.sqlite"), role: .phone, registry: try Self.registry())
        defer { reopened.close() }
        #expect(try await reopened.get(TestKeys.steps) == 4_321)
        #expect(try await reopened.get(TestKeys.name) == "Ada")
        withExtendedLifetime(store) {}
    }

    /// An app that opens and closes stores over and over keeps no descriptor of them.
    @Test func closingReleasesTheFilesDescriptors() async throws {
        let folder = TempFolder()
        var stores: [SyncStore] = []
        for index in 0..<50 {
            let store = try SyncStore(path: folder.file("s\(index).sqlite"), role: .phone, registry: try Self.registry())
            try await store.set(index, for: TestKeys.steps)
            _ = try store.entryInfo(forKey: "health:daily:steps")
            try store.syncCommitted()
            store.close()
            stores.append(store)   // still referenced: only close() releases the files
        }
        let left = Self.openFileDescriptors(in: folder)
        #expect(left == 0, "\(left) descriptors left open by 50 closed stores")
        #expect(throws: SyncError.self) { _ = try stores[0].entryInfo(forKey: "health:daily:steps") }
    }

    /// `close()` from a will-commit hook (holding the writer) and from a
    /// did-commit hook neither deadlocks nor crashes; the write commits and the file closes as it returns.
    @Test(arguments: [true, false]) func closeFromACommitHook(willCommit: Bool) async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try Self.registry())
        try await store.set(1, for: TestKeys.steps)
        let hook: @Sendable ([StoreChange]) -> Void = { [weak store] _ in store?.close() }
        if willCommit { store.addWillCommitHook(hook) } else { store.addDidCommitHook(hook) }
        try? await store.set(2, for: TestKeys.steps)
        #expect(store.isClosed)
        await #expect(throws: SyncError.self) { try await store.set(3, for: TestKeys.steps) }
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        let reopened = try SyncStore(path: path, role: .phone, registry: try Self.registry())
        defer { reopened.close() }
        #expect(try await reopened.get(TestKeys.steps) == 2)
    }

    /// Threads reading and writing while the store closes end with `.closed`,
    /// never a crash; every write that returned is in the file.
    @Test func closeWhileOtherThreadsReadAndWrite() async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try Self.registry())
        let committed = Atomic<Int>(0)
        let (closed, closedSignal) = AsyncStream<Void>.makeStream()
        // Closed from a thread of its own once 40 writes committed: not from a task, which a busy
        // cooperative pool may run late while the threads below keep both cores busy.
        store.addDidCommitHook { [weak store] _ in
            guard committed.add(1, ordering: .relaxed).newValue == 40, let store else { return }
            Thread {
                store.close()
                closedSignal.finish()
            }.start()
        }
        let ends = (0..<4).map { worker -> AsyncStream<Void> in
            let (ended, end) = AsyncStream<Void>.makeStream()
            Thread {
                defer { end.finish() }
                var index = 0
                // Bounded: a worker that outlives the close by far would spin the cores for nothing.
                while index < 100_000 {
                    index += 1
                    do {
                        if worker < 2 {
                            try store.batchNow { try $0.set(worker * 1_000_000 + index, for: TestKeys.steps) }
                        } else {
                            _ = try store.allEntryInfo()
                        }
                    } catch let error as SyncError {
                        #expect(error.code == .closed, "\(error)")
                        return
                    } catch {
                        Issue.record("\(error)")
                        return
                    }
                }
            }.start()
            return ended
        }
        for await _ in closed {}
        #expect(store.isClosed)
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        for ended in ends { for await _ in ended {} }
        let reopened = try SyncStore(path: path, role: .phone, registry: try Self.registry())
        defer { reopened.close() }
        #expect(try await reopened.get(TestKeys.steps) > 0)
    }
}

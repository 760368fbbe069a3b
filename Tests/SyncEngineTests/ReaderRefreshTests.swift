import Foundation
@testable import SyncEngine
import Testing

/// After a commit, the committing thread moves the idle reader connections
/// that served the app's reads onto the new snapshot
/// (`ReaderPool.refreshIdleConnections`), so that
/// the app's next read does not read page 1 and the key's whole path down
/// the b-tree again (SQLite drops a WAL reader's cached pages when it finds
/// a commit it has not seen).
@Suite struct ReaderRefreshTests {
    static let notes = KeyFamily<String>("note", default: "", availability: .all, policy: .never)

    /// A store whose reads all go to the reader connections, with 3,000
    /// rows of about 230 bytes: a b-tree four pages deep with page 1.
    static func filledStore(_ folder: TempFolder) throws -> SyncStore {
        var options = StoreOptions()
        options.maxCachedValueSize = -1
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([notes]), options: options)
        try store.batchNow { batch in
            for i in 0..<3_000 { try batch.set(String(repeating: "v", count: 200) + "\(i)", for: notes[Self.name(i)]) }
        }
        return store
    }

    /// `n0000` … `n2999`: key order is number order.
    static func name(_ i: Int) -> String { "n" + String(repeating: "0", count: 4 - String(i).count) + String(i) }

    /// The read after a commit reads at most its key's own interior page and
    /// leaf, and sees the commit.
    @Test func aReadAfterACommitFindsItsConnectionOnTheNewSnapshot() throws {
        let folder = TempFolder()
        let store = try Self.filledStore(folder)
        defer { store.close() }
        for i in 100..<110 { _ = try store.value(for: Self.notes[Self.name(i)]) }
        try store.setNow("changed", for: Self.notes[Self.name(2999)])
        let missesBefore = store.database.idleReaderPageCacheMisses
        #expect(try store.value(for: Self.notes[Self.name(110)]) == String(repeating: "v", count: 200) + "110")
        let pagesRead = store.database.idleReaderPageCacheMisses - missesBefore
        // Dropped, the cache costs 5 pages here: page 1 and the key's whole path down the b-tree.
        // Refreshed on the key the app read last (the write's own read does not count), page 1 and
        // the top of the tree are cached: the next key's own interior page and leaf at most.
        #expect(pagesRead <= 2, "the read after the commit read \(pagesRead) pages: its connection's cache was dropped")
        // The refreshed connection sees the commit.
        #expect(try store.value(for: Self.notes[Self.name(2999)]) == "changed")
    }

    /// The writer refreshes a connection once for each app's read it served,
    /// not once for each commit: commits with no reads between them (a
    /// burst of writes, whose own reads do not count) cost nothing more.
    @Test func aConnectionIsRefreshedOncePerReadItServed() throws {
        let folder = TempFolder()
        let store = try Self.filledStore(folder)
        defer { store.close() }
        _ = try store.value(for: Self.notes[Self.name(5)])
        let before = store.database.readerRefreshes
        for i in 0..<20 { try store.setNow("write \(i)", for: Self.notes[Self.name(i)]) }
        #expect(store.database.readerRefreshes - before == 1)
        _ = try store.value(for: Self.notes[Self.name(6)])
        try store.setNow("again", for: Self.notes[Self.name(0)])
        #expect(store.database.readerRefreshes - before == 2)
    }

    /// A store with no reader connections (every read on the writer) commits as before.
    @Test func aStoreWithoutReadersHasNothingToRefresh() throws {
        let folder = TempFolder()
        var options = StoreOptions()
        options.readerConnections = 0
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([Self.notes]), options: options)
        defer { store.close() }
        try store.setNow("a", for: Self.notes["n1"])
        _ = try store.value(for: Self.notes["n1"])
        try store.setNow("b", for: Self.notes["n1"])
        #expect(store.database.readerRefreshes == 0)
        #expect(try store.value(for: Self.notes["n1"]) == "b")
    }
}

import CSQLite
import Dispatch
import Synchronization

/// A few read-only connections to the store's file, beside the writer, for
/// reads that must not wait behind a write transaction (a batch from the peer
/// being applied and committed). In WAL mode each read starts its own
/// snapshot when its statement first steps, so it sees every transaction
/// committed before that (read-your-writes: once a commit returned, a read
/// started after it sees it), and never blocks on the writer, nor the writer on it.
///
/// Connections open on first use, at most `capacity`; a read that finds them
/// all busy waits for one.
final class ReaderPool: Sendable {
    let path: String
    let vfs: String?
    let capacity: Int
    private let corruption: CorruptionFlag
    /// Connections not in use. Each one is used by one thread at a time: taken
    /// out of here, used, put back.
    private let idle = Mutex(IdleConnections())
    /// Counts free places: idle connections plus ones not opened yet.
    private let places: DispatchSemaphore

    private struct IdleConnections {
        var connections: [SQLiteConnection] = []
        var opened = 0
        /// Set by `close()`: reads throw `.closed`, connections close as they come back.
        var closed = false
        /// The threads reading now, one entry per read (`close()` does not wait for its own thread's).
        var readingThreads: [UInt] = []
        /// The key the app's latest read given back looked up (`SQLiteConnection.lastLookedUpKey`).
        var lastLookedUpKey: String?
    }

    /// Reads of a key's row through `Schema.keyLookupSQL`, run by
    /// `refreshIdleConnections` (tests).
    let refreshes = Atomic<Int>(0)

    init(path: String, vfs: String?, capacity: Int, corruption: CorruptionFlag) {
        self.path = path
        self.vfs = vfs
        self.capacity = max(1, capacity)
        self.corruption = corruption
        places = DispatchSemaphore(value: max(1, capacity))
    }

    /// Runs `body` with a reader connection (outside any transaction: each
    /// statement reads the newest committed state). Throws `.closed` after `close()`.
    func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        places.wait()
        defer { places.signal() }
        let connection = try take()
        defer { giveBack(connection) }
        return try body(connection)
    }

    private func giveBack(_ connection: SQLiteConnection) {
        let thread = Database.currentThread
        idle.withLock { state in
            if let index = state.readingThreads.firstIndex(of: thread) { state.readingThreads.remove(at: index) }
            if connection.readSinceRefresh, let key = connection.lastLookedUpKey { state.lastLookedUpKey = key }
            if state.closed { connection.close() } else { state.connections.append(connection) }
        }
    }

    /// Called by the committing thread once a commit's write returns (its
    /// lock released, its observers told): moves each idle connection
    /// that served an app's read since it was last refreshed onto the new
    /// snapshot, by looking up again the key the app's latest read looked up.
    ///
    /// A WAL reader that finds a commit it has not seen drops every page it
    /// cached, so the first read after each commit read page 1 and the key's
    /// whole path down the `entries` b-tree again (5–7 pages, 15–45 µs
    /// against 4–5 µs): during an initial sync, one read in 35 and the whole
    /// p99. Here the committing thread pays that instead, and the app's next
    /// read finds page 1 and the tree's top cached (where its key's path
    /// leaves the refreshed key's, it still reads the rest). A read can still
    /// come between the COMMIT and this refresh and pay it all itself.
    ///
    /// Never waits: a connection in use, or a pool whose places are all
    /// taken, is left as it is. Errors are left to the app's next read on
    /// the connection, which meets them again and reports them.
    func refreshIdleConnections() {
        // Nothing to do (no read for the app yet, or none since the last refresh) costs one look under the lock.
        let (stale, lookedUp) = idle.withLock { state -> ([ObjectIdentifier], String?) in
            guard !state.closed, let key = state.lastLookedUpKey, state.connections.contains(where: \.readSinceRefresh) else { return ([], nil) }
            return (state.connections.filter(\.readSinceRefresh).map(ObjectIdentifier.init), key)
        }
        guard let key = lookedUp else { return }
        // Oldest first, each given back last: the pool keeps its order, so the app's next read
        // (the last one given back) takes the connection it would have taken.
        for id in stale {
            guard places.wait(timeout: .now()) == .success else { return }
            defer { places.signal() }
            let taken = idle.withLock { state -> SQLiteConnection? in
                guard !state.closed, let index = state.connections.firstIndex(where: { ObjectIdentifier($0) == id }) else { return nil }
                return state.connections.remove(at: index)
            }
            guard let connection = taken else { continue }
            connection.readSinceRefresh = false
            if let lookup = try? connection.statement(Schema.keyLookupSQL) {
                lookup.bind(1, key)
                _ = try? lookup.step()
                lookup.reset()
                refreshes.add(1, ordering: .relaxed)
            }
            idle.withLock { state in
                if state.closed { connection.close() } else { state.connections.append(connection) }
            }
        }
    }

    /// The pages the idle connections read from the file because their page
    /// caches did not hold them, since each one opened (tests).
    var idlePageCacheMisses: Int {
        idle.withLock { state in state.connections.reduce(0) { $0 + $1.pageCacheMisses } }
    }

    /// Closes every connection: waits for the reads running on other threads
    /// (a read running on this thread closes its connection as it ends).
    /// Later reads throw `.closed`.
    func close() {
        let thread = Database.currentThread
        let own = idle.withLock { state -> Int in
            state.closed = true
            return state.readingThreads.filter { $0 == thread }.count
        }
        // Every place but this thread's: each read on another thread ends before its place comes back.
        for _ in own..<capacity { places.wait() }
        idle.withLock { state in
            for connection in state.connections { connection.close() }
            state.connections = []
        }
        for _ in own..<capacity { places.signal() }
    }

    private func take() throws -> SQLiteConnection {
        let thread = Database.currentThread
        let taken = try idle.withLock { state throws(SyncError) -> SQLiteConnection? in
            if state.closed { throw SyncError.storeClosed(path) }
            state.readingThreads.append(thread)
            if let connection = state.connections.popLast() { return connection }
            state.opened += 1
            return nil
        }
        if let taken { return taken }
        do {
            return try open()
        } catch {
            idle.withLock { state in
                state.opened -= 1
                if let index = state.readingThreads.firstIndex(of: thread) { state.readingThreads.remove(at: index) }
            }
            throw error
        }
    }

    private func open() throws -> SQLiteConnection {
        let connection = try SQLiteConnection(path: path, vfs: vfs, corruption: corruption)
        // Readers never write, and never checkpoint when they close (the writer does).
        connection.setCheckpointOnClose(false)
        try connection.execute("PRAGMA query_only=1")
        try connection.execute("PRAGMA cache_size=-2048")
        return connection
    }
}

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
    }

    init(path: String, vfs: String?, capacity: Int, corruption: CorruptionFlag) {
        self.path = path
        self.vfs = vfs
        self.capacity = max(1, capacity)
        self.corruption = corruption
        places = DispatchSemaphore(value: max(1, capacity))
    }

    /// Runs `body` with a reader connection (outside any transaction: each
    /// statement reads the newest committed state).
    func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        places.wait()
        defer { places.signal() }
        let connection = try take()
        defer { idle.withLock { $0.connections.append(connection) } }
        return try body(connection)
    }

    private func take() throws -> SQLiteConnection {
        let taken = idle.withLock { state -> SQLiteConnection? in
            if let connection = state.connections.popLast() { return connection }
            state.opened += 1
            return nil
        }
        if let taken { return taken }
        do {
            return try open()
        } catch {
            idle.withLock { $0.opened -= 1 }
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

/// Where a store keeps the bytes of its values: in the `entries` rows
/// (`RowValueStorage`, what `SyncStore` uses) or one file per value
/// (`ValueFiles`, what `FileValueStore` uses). `SyncStore` writes, reads,
/// replaces and recovers every value through its storage; the rows always
/// hold the metadata (version, size, lane, …), which replication reads.
protocol ValueStorage: Sendable {
    /// True when values stay in the rows: a batch is then written several
    /// rows per statement.
    var keepsValuesInRows: Bool { get }
    /// Inside the write transaction, before `key`'s row is written at
    /// `version`: keeps `bytes` (sealed when the key is encrypted; nil for a
    /// tombstone) and returns what the row's `value` column holds and whether
    /// the value is in a file.
    func place(_ bytes: [UInt8]?, deleted: Bool, key: String, version: HLCTimestamp,
               in conn: SQLiteConnection) throws -> (column: [UInt8]?, inFile: Bool)
    /// The stored bytes of a value whose row says it is in a file.
    func readFile(key: String, version: HLCTimestamp) throws -> [UInt8]
    /// A row of `key` at `version` that pointed at a file goes in this
    /// transaction: its file goes after the commit.
    func release(key: String, version: HLCTimestamp)
    /// The transaction ended: what it made obsolete goes (after a commit), or
    /// what it wrote (after a rollback).
    func transactionEnded(committed: Bool)
    /// At open, in a write transaction: removes what a crash left behind.
    func recover(in conn: SQLiteConnection) throws
    /// After `recover`'s transaction committed: finishes what it found.
    func recovered() throws
}

/// Values in the `entries` rows: nothing to place, release or recover.
struct RowValueStorage: ValueStorage {
    var keepsValuesInRows: Bool { true }

    func place(_ bytes: [UInt8]?, deleted: Bool, key: String, version: HLCTimestamp,
               in conn: SQLiteConnection) throws -> (column: [UInt8]?, inFile: Bool) {
        (bytes, false)
    }

    func readFile(key: String, version: HLCTimestamp) throws -> [UInt8] {
        throw SyncError(.invalidConfiguration, "key '\(key)' is kept in a value file but the store was opened without its value directory; open it as a FileValueStore")
    }

    func release(key: String, version: HLCTimestamp) {}
    func transactionEnded(committed: Bool) {}
    func recover(in conn: SQLiteConnection) throws {}
    func recovered() throws {}
}

extension ValueFiles: ValueStorage {
    var keepsValuesInRows: Bool { false }

    /// Writes the new version's file (never over the committed one: the same
    /// version written again is staged and renamed after the commit) and
    /// marks the replaced version's file for deletion after the commit.
    func place(_ bytes: [UInt8]?, deleted: Bool, key: String, version: HLCTimestamp,
               in conn: SQLiteConnection) throws -> (column: [UInt8]?, inFile: Bool) {
        try forgetRenamedStaged(in: conn)
        let previous = try conn.statement("SELECT ver, node FROM entries WHERE key = ? AND in_file = 1")
        previous.bind(1, key)
        var rewritesCommittedFile = false
        if try previous.step() {
            let old = HLCTimestamp(packed: previous.int64(0), node: UInt32(truncatingIfNeeded: previous.int64(1)))
            if old != version { supersede(key: key, version: old) } else { rewritesCommittedFile = true }
        }
        previous.reset()
        guard let bytes, !deleted else { return (bytes, false) }
        if rewritesCommittedFile {
            try writeAgain(bytes, key: key, version: version, in: conn)
        } else {
            try write(bytes, key: key, version: version)
        }
        return (nil, true)
    }

    func readFile(key: String, version: HLCTimestamp) throws -> [UInt8] { try read(key: key, version: version) }

    func recovered() throws { try renameRecovered() }

    func release(key: String, version: HLCTimestamp) { supersede(key: key, version: version) }

    /// Renames the staged files of commits a crash cut short, then deletes
    /// value files left by a crash before their row committed (the write
    /// transaction keeps other processes from being between writing a file
    /// and committing its row).
    func recover(in conn: SQLiteConnection) throws {
        let stmt = try conn.statement("SELECT key, ver, node FROM entries WHERE in_file = 1")
        var referenced: Set<String> = []
        while try stmt.step() {
            referenced.insert(ValueFiles.fileName(key: stmt.string(0), version: HLCTimestamp(packed: stmt.int64(1), node: UInt32(truncatingIfNeeded: stmt.int64(2)))))
        }
        stmt.reset()
        // First the staged files of commits a crash kept from being renamed: the rest goes.
        let staged = try stageCommittedRenames(referenced: referenced, in: conn)
        removeUnreferenced(referenced: referenced.union(staged))
    }
}

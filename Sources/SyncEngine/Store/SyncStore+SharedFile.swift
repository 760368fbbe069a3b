import CSQLite
import Synchronization
import SyncTransport

/// What a store knows about other connections (usually other processes, e.g.
/// an app and its extension) writing the same file.
///
/// Every write transaction appends the keys it changed to `sync_commit_log`.
/// When `PRAGMA data_version` shows that another connection committed, the
/// store reads the log rows it has not seen: it drops those keys from its
/// cache, moves its change sequence and clock past the other writer's, and
/// tells its observers. This runs at the start of every write transaction
/// (so versions and sequence numbers never collide) and on a timer
/// (`StoreOptions.externalChangePollInterval`) or `checkForExternalChanges()`.
struct SharedFileState {
    var dataVersion: Int64 = 0
    var lastLogID: Int64 = 0
    /// Changes of the open transaction, logged before it commits.
    var transactionChanges: [StoreChange] = []
    var seqAtBegin: Int64 = 0
    /// Changes made by other connections, published once the lock is released.
    var unpublished: [StoreChange] = []
    var logInserts = 0
}

extension SyncStore: TransactionObserver {
    /// Log rows kept for processes that have not caught up yet.
    static let commitLogRetention: Int64 = 10_000
    /// The highest commit log row number a store reaches (one row per commit); a higher one is a damaged row.
    static let maxLogID: Int64 = 1 << 62
    static let commitLogInsertSQL = "INSERT INTO sync_commit_log(changes, format) VALUES(?, \(CommitLogRecord.currentFormat))"

    func transactionBegan(_ conn: SQLiteConnection) throws {
        try catchUpWithOtherWriters(conn)
        let seq = nextSeq.withLock { $0 }
        shared.withLock { s in
            s.transactionChanges.removeAll(keepingCapacity: true)
            s.seqAtBegin = seq
        }
    }

    func transactionWillCommit(_ conn: SQLiteConnection) throws {
        let seqHigh = nextSeq.withLock { $0 } - 1
        let (changes, seqAtBegin) = shared.withLock { s in (s.transactionChanges, s.seqAtBegin) }
        guard !changes.isEmpty || seqHigh >= seqAtBegin else { return }
        let record = CommitLogRecord(sequenceHigh: seqHigh, clockLatest: clock.latest, changes: changes)
        let insert = try conn.statement(SyncStore.commitLogInsertSQL)
        insert.bind(1, record.encoded())
        try insert.run()
        let id = sqlite3_last_insert_rowid(conn.handle)
        let prune = shared.withLock { s -> Bool in
            s.lastLogID = id
            s.logInserts += 1
            return s.logInserts % 256 == 0
        }
        if prune {
            let delete = try conn.statement("DELETE FROM sync_commit_log WHERE id <= ?")
            delete.bind(1, id - SyncStore.commitLogRetention)
            try delete.run()
        }
    }

    func transactionEnded(committed: Bool) {
        valueStorage.transactionEnded(committed: committed)
        shared.withLock { $0.transactionChanges.removeAll(keepingCapacity: true) }
    }

    func transactionUnlocked() {
        publishExternalChanges()
    }

    /// Notes a row written in the open transaction, for other processes' logs.
    func logWrite(_ row: StoredRow) {
        let change = StoreChange(key: row.key, kind: row.deleted ? .removed : .set,
                                 origin: row.version.node == nodeID ? .local : .remote, version: row.version)
        shared.withLock { $0.transactionChanges.append(change) }
    }

    /// Notes the changes of rows written in the open transaction (each as `logWrite` makes it), in one step.
    func logWrites(_ changes: ArraySlice<StoreChange>) {
        shared.withLock { $0.transactionChanges.append(contentsOf: changes) }
    }

    /// Looks for commits of other processes to this file now (it also happens on
    /// a timer and before every write): invalidates the cache for the keys they
    /// changed and tells observers.
    public func checkForExternalChanges() throws {
        try checkOpen()
        _ = try database.read { conn in try catchUpWithOtherWriters(conn) }
        publishExternalChanges()
    }

    /// The timer's look; whether it found other processes' commits. None
    /// while the connection is in use (never waiting for a transaction, on a
    /// thread of the concurrency pool): a write transaction looks when it
    /// begins and tells observers when it ends, and the next tick looks again.
    func lookForExternalChangesUnlessBusy() throws -> Bool {
        try checkOpen()
        guard let found = try database.readIfFree({ conn in try catchUpWithOtherWriters(conn) }) else { return false }
        publishExternalChanges()
        return found
    }

    /// Records the current data version and log position, at open.
    func startSharedFileTracking() throws {
        try database.read { conn in
            let last = try conn.statement("SELECT coalesce(max(id), 0) FROM sync_commit_log WHERE id <= \(SyncStore.maxLogID)")
            _ = try last.step()
            let id = last.int64(0)
            last.reset()
            let version = try SyncStore.dataVersion(conn)
            shared.withLock { s in
                s.lastLogID = id
                s.dataVersion = version
            }
        }
        database.setObserver(self)
        if let interval = options.externalChangePollInterval {
            // `interval` after a look that found other processes' commits; each look that finds
            // none doubles the wait, up to a second (or `interval`, if longer): a store nobody
            // else writes is not looked at ten times a second, and a commit made by another
            // process after a quiet spell is seen within a second. No lock is held for it (a
            // process suspended holding a lock on a file in an App Group container is killed).
            // Holds the store only while it looks: a dropped store is freed at once.
            let willWait = options.externalLookWillWait
            Task.detached { [weak self] in
                var looks = TickSchedule(base: interval, quiet: max(interval, SyncStore.quietPollInterval))
                var wait = interval.cappedForSleep
                while true {
                    willWait?(wait)
                    try? await Task.sleep(for: wait)
                    guard let store = self, !store.isClosed else { return }
                    let found = (try? store.lookForExternalChangesUnlessBusy()) ?? false
                    wait = looks.next(after: .tick(sent: found), quiet: true)
                    store.timedWaits.publish(.externalLook(wait))
                }
            }
        }
    }

    /// The longest wait between two looks of the timer that found nothing.
    static let quietPollInterval = Duration.seconds(1)

    private static func dataVersion(_ conn: SQLiteConnection) throws -> Int64 {
        let stmt = try conn.statement("PRAGMA data_version")
        _ = try stmt.step()
        defer { stmt.reset() }
        return stmt.int64(0)
    }

    /// Under the connection lock: reads what other connections committed
    /// since last time; whether there was any.
    @discardableResult
    private func catchUpWithOtherWriters(_ conn: SQLiteConnection) throws -> Bool {
        let version = try SyncStore.dataVersion(conn)
        let lastLogID = shared.withLock { $0.dataVersion == version ? nil : $0.lastLogID }
        guard let lastLogID else { return false }
        let stmt = try conn.statement("SELECT id, changes, format FROM sync_commit_log WHERE id > ? ORDER BY id")
        stmt.bind(1, lastLogID)
        var newest = lastLogID
        var changes: [StoreChange] = []
        var seqHigh: Int64 = 0
        var gap = false
        var damaged = false
        while try stmt.step() {
            let id = stmt.int64(0)
            guard id <= SyncStore.maxLogID else {
                damaged = true  // (removed at the next open; never where this store looks from)
                continue
            }
            if newest == lastLogID && id != lastLogID + 1 { gap = true }
            newest = id
            do {
                let record = try CommitLogRecord(stmt.blob(1) ?? [], format: stmt.int(2))
                // A sequence no store reaches (the next would overflow) is a damaged row.
                guard record.sequenceHigh <= SyncStore.maxSequence else { throw SyncError(.database, "a commit log row's sequence is out of range") }
                seqHigh = max(seqHigh, record.sequenceHigh)
                if record.clockLatest <= versionBound() { clock.observe(HLCTimestamp(packed: record.clockLatest, node: nodeID)) }
                changes += record.changes
            } catch {
                damaged = true
            }
        }
        stmt.reset()
        if gap || damaged {
            // Fell behind the log's retention (or a row is unreadable): start from the file itself.
            let floor = try conn.statement(SyncStore.sequenceFloorSQL)
            floor.bind(1, versionBound())
            floor.bind(2, Int64(nodeID))
            _ = try floor.step()
            clock.observe(HLCTimestamp(packed: floor.int64(0), node: nodeID))
            seqHigh = max(seqHigh, min(floor.int64(1), SyncStore.maxSequence))
            floor.reset()
            cache.invalidateAll()
            logger.notice("another process changed this store more than the commit log keeps; the whole cache was dropped")
        } else {
            for change in changes { cache.invalidate(change.key) }
        }
        nextSeq.withLock { $0 = max($0, seqHigh + 1) }
        try adoptNodeIDOfOtherWriters(conn)
        shared.withLock { s in
            s.dataVersion = version
            s.lastLogID = newest
            s.unpublished += changes
        }
        return true
    }

    /// The node id another connection took for the file (`renewNodeID()`):
    /// this store's versions carry it from now on, and its sessions whose
    /// hello named the old one end, as the renewing store's do.
    private func adoptNodeIDOfOtherWriters(_ conn: SQLiteConnection) throws {
        let stmt = try conn.statement("SELECT value FROM sync_meta WHERE name = 'node_id'")
        defer { stmt.reset() }
        guard try stmt.step(), let node = UInt32(stmt.string(0)), node != 0, node != MailboxReplicator.unknownPeer,
              node != clock.node else { return }
        clock.adopt(node: node)
        nodeRenewals.publish(node)
    }

    private func publishExternalChanges() {
        let changes = shared.withLock { s -> [StoreChange] in
            defer { s.unpublished.removeAll() }
            return s.unpublished
        }
        guard !changes.isEmpty else { return }
        publishCommitted(changes)
        // Wake a replication loop in this process: the other process's writes may need sending.
        localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
        localWrites.publish(SyncStore.thisDevice)
    }
}

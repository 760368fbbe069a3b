import Logging
import Synchronization

extension SyncStore {
    /// What the store's clock calls when it stops following a time it issued
    /// past `StoreOptions.maxRemoteClockAhead` of the wall clock (the device's
    /// clock ran ahead and was set right): a warning, since the writes made
    /// meanwhile were refused by the peer and keep those versions here.
    /// Then `then` hears of it (the store's writes made meanwhile go out again).
    static func clockDropped(_ logger: Logger, then: ClockSetRight? = nil) -> @Sendable (_ packed: Int64, _ wallMilliseconds: Int64) -> Void {
        { packed, wall in
            let ahead = (packed >> 16).subtractingReportingOverflow(wall).partialValue
            logger.warning("the wall clock is far behind the versions this device issued (it ran ahead and was set right); versions follow the wall clock again",
                           metadata: ["aheadMilliseconds": "\(ahead)", "dropped": "\(HLCTimestamp(packed: packed, node: 0))"])
            then?.target.withLock { $0 }?()
        }
    }

    /// Writes again, with versions from the clock as it reads now, the rows
    /// this device wrote while its wall clock ran more than
    /// `StoreOptions.maxRemoteClockAhead` ahead (a wrong year, set right
    /// since). Every peer whose clock is right refused those versions, so the
    /// values stayed here until their keys were written again; now they go
    /// out. Each keeps its value (or its removal). A row whose value no
    /// longer reads, or whose key this device may no longer write (an app
    /// update), is left as it is. Returns how many rows were written.
    @discardableResult
    func reissueWritesFromAClockAhead() throws -> Int {
        try checkOpen()
        let now = physicalClock.nowMilliseconds()
        let bound = SyncStore.versionBound(now: now, ahead: options.maxRemoteClockAhead)
        // A read first: a store with no such row takes no write lock.
        guard try !database.readCommitted({ try SyncStore.keysWrittenPast(bound, by: nodeID, $0) }).isEmpty else { return 0 }
        return try commitLocal(rewriting: { conn in
            // Again under the write lock: what is still past the bound, as it is now.
            var writes: [BackendWrite] = []
            var descriptors: [KeyDescriptor] = []
            for key in try SyncStore.keysWrittenPast(bound, by: nodeID, conn) {
                guard let row = try loadRow(conn, key: key, valueFile: .ifReadable), row.deleted || row.value != nil else { continue }
                let bytes = row.deleted ? nil : row.value
                guard let descriptor = try? registry.checkedWrite(key, bytes: bytes, role: role, maxValueSize: options.maxValueSize, known: nil) else {
                    continue
                }
                writes.append(BackendWrite(key: key, descriptor: descriptor, bytes: bytes, decoded: nil))
                descriptors.append(descriptor)
            }
            return (writes, descriptors)
        }, writtenAt: now).count
    }

    /// `reissueWritesFromAClockAhead`, its outcome logged.
    func reissueWritesFromAClockAheadLogged() {
        do {
            let written = try reissueWritesFromAClockAhead()
            if written > 0 {
                logger.notice("wrote again what this device wrote while its clock ran far ahead (its peers refused those versions)",
                              metadata: ["rows": "\(written)"])
            }
        } catch let error as SyncError where error.code == .closed {
        } catch {
            logger.warning("writes made while the clock ran far ahead could not be written again; they go out when their keys are written", metadata: ["error": "\(error)"])
        }
    }

    /// The keys of the rows `node` wrote with a version past `bound`.
    static func keysWrittenPast(_ bound: Int64, by node: UInt32, _ conn: SQLiteConnection) throws -> [String] {
        let select = try conn.statement("SELECT key FROM entries WHERE ver > ?1 AND node = ?2")
        select.bind(1, bound)
        select.bind(2, Int64(node))
        defer { select.reset() }
        var keys: [String] = []
        while try select.step() { keys.append(select.string(0)) }
        return keys
    }
}

/// Where a store's clock says it stopped following a far-future time it
/// issued (set once the store is open; the clock is made before it).
final class ClockSetRight: Sendable {
    let target = Mutex<(@Sendable () -> Void)?>(nil)
}

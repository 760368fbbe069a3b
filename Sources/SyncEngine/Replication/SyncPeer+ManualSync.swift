/// `sync()`: this device's manual changes released, and the peer's asked for.
extension SyncPeer {
    /// Releases this device's manual and deferred changes for sending (to
    /// every peer); returns how many entries that queues. It never brings the
    /// peer's manual changes: those wait for the peer's own `sync()`, or ask
    /// for them with `sync(includingPeer: true)` / `requestManualChanges()`.
    @discardableResult
    public func sync() throws -> Int { try store.requestManualSync() }

    /// `sync()`, and with `includingPeer` also asks every connected peer for
    /// its manual changes (`requestManualChanges()`). Returns how many entries
    /// this device released.
    @discardableResult
    public func sync(includingPeer: Bool) throws -> Int {
        let released = try sync()
        if includingPeer { requestManualChanges() }
        return released
    }
}

import SyncTransport

// Entry points for the micro benchmarks in Benchmarks/ (a separate package that
// cannot use `@testable import`). `@_spi(Benchmarks)`: not part of the stable API.

extension SyncMessage {
    /// A batch message, as the replication session builds one for the peer.
    @_spi(Benchmarks)
    public static func batch(id: UInt64, entries: [WireEntry]) -> SyncMessage {
        .batch(Batch(id: id, entries: entries))
    }
}

extension SyncStore {
    /// Applies entries received from a peer of `peerRole` in one transaction,
    /// exactly as a replication session applies a batch (merge rule, policies,
    /// conflict log). Returns how many entries changed the store. As in a
    /// `SyncPeer` session, the WAL sync that must precede the acknowledgement is
    /// not waited for here (the session's `WALSyncer` runs it beside the next
    /// apply; `syncCommitted()` waits for it).
    @_spi(Benchmarks)
    @discardableResult
    public func applyRemoteBatch(_ entries: [WireEntry], from peerRole: DeviceRole) throws -> Int {
        try applyRemote(entries, peerRole: peerRole, mismatched: [], durableBeforeReturn: false).applied
    }
}

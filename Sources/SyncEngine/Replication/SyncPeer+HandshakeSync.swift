extension SyncPeer {
    /// Before `hello` establishes a session, whose receipt vouches only for
    /// what is on stable storage: syncs the WAL on the syncer's queue, so that
    /// the endpoint's own sync at the handshake (`port.syncCommitted()`, on
    /// the session's thread, one of the cooperative pool's) finds nothing left
    /// to do instead of holding that thread for an `fsync`. A failure is left
    /// to that sync, which meets and reports it as it always did.
    func syncBeforeReceipt(answering hello: SyncMessage.Hello) async {
        guard hello.protocolRange.upperBound >= SyncMessage.receiptProtocol,
              let received = try? store.receivedThrough(from: hello.node), received.through > 0 else { return }
        try? await store.syncCommittedAsync()
    }
}

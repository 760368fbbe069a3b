import SyncTransport

/// Acknowledgements that rest on commits: a peer may forget what this side
/// acknowledged, so each goes out only once its commit is on stable storage,
/// at once (step-driven use) or after the driver's sync beside the session
/// (`defersAcknowledgementSync`, `SyncPeer`).
extension ReplicationEndpoint {
    /// Whether the driver must sync the store's commits even with no
    /// acknowledgement waiting (a watch's cursor moved); taking it clears it.
    package func takeCursorSyncRequest() -> Bool {
        defer { cursorAwaitsSync = false }
        return cursorAwaitsSync
    }

    /// Acknowledgements whose commits must be on stable storage before they
    /// are sent (only with `defersAcknowledgementSync`); taking them empties the list.
    package func takeFramesAwaitingSync() -> [Frame] {
        defer { awaitingSync.removeAll() }
        return awaitingSync
    }

    /// Sends `frame`, an acknowledgement of commits, once they are on stable
    /// storage: now (after a sync, free when they already are), or through
    /// `takeFramesAwaitingSync()`.
    func acknowledgeDurably(_ frame: Frame, into out: inout [Frame]) throws {
        if defersAcknowledgementSync {
            awaitingSync.append(frame)
        } else {
            try port.syncCommitted()
            out.append(frame)
        }
    }
}

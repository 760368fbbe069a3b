import SyncTransport

/// A phone's cursor for its peer, recorded less often than it moves
/// (`defersCursorRecord`, set by `SyncPeer`): each acknowledgement moved it
/// in a transaction of its own, one commit on the phone per replicated write.
/// The recorded cursor only says where the next session resumes: one that
/// lags (a crash) makes the phone send a little again, which the peer
/// ignores. Nothing in flight, a tick past `cursorRecordInterval`, and the
/// end of the session record it. A watch's cursor is always recorded at
/// once, and synced (`complete(upper:)`): it tells a phone that forgot the
/// watch which of the watch's writes it already had.
extension ReplicationEndpoint {
    /// How long, at most, a phone's cursor lags in its store while batches keep being acknowledged (milliseconds).
    static let cursorRecordInterval: Int64 = 1_000

    /// The range ending at `upper` was acknowledged: the cursor moves over
    /// every acknowledged range at the front, and is recorded (a phone's may
    /// wait in the session: `defersCursor`).
    func complete(upper: Int64) throws {
        if let reached = session.stream.complete(upper: upper), let peer = session.knownPeer {
            if defersCursor {
                unrecordedCursor = reached
                return
            }
            try recordCursor(reached, for: peer.node)
            // A watch's cursor is what tells, if the phone ever forgets and re-baselines it,
            // which of its own writes the phone already had: it goes to stable storage too
            // (lost to a power cut, an old write the phone has since deleted would come back).
            if port.role == .watch {
                if defersAcknowledgementSync { cursorAwaitsSync = true } else { try port.syncCommitted() }
            }
        }
    }

    /// Whether `complete(upper:)` leaves the cursor it reached in the session:
    /// a phone's, with more batches in flight, recorded less than an interval ago.
    var defersCursor: Bool {
        port.role == .phone && defersCursorRecord && !session.stream.ranges.isEmpty && !cursorRecordIsDue
    }

    /// Whether `cursorRecordInterval` has passed since the cursor was last recorded.
    private var cursorRecordIsDue: Bool {
        port.nowMilliseconds() - cursorRecordedAt >= ReplicationEndpoint.cursorRecordInterval
    }

    /// Moves `peer`'s cursor in the store.
    func recordCursor(_ cursor: Int64, for peer: UInt32) throws {
        try port.acknowledge(peer: peer, through: cursor)
        unrecordedCursor = nil
        cursorRecordedAt = port.nowMilliseconds()
    }

    /// Records the cursor `complete(upper:)` left in the session; when
    /// `dueOnly` (a tick), only once `cursorRecordInterval` has passed.
    func recordDeferredCursor(dueOnly: Bool = false) {
        guard let cursor = unrecordedCursor, let peer = livePeer else { return }
        if dueOnly, !cursorRecordIsDue { return }
        do {
            try recordCursor(cursor, for: peer)
        } catch {
            reporter.logger.warning("could not record how far the peer acknowledged this store's changes", metadata: ["error": "\(error)"])
        }
    }
}

import SyncTransport

/// A queued batch's acknowledgement, bounded so that it always fits a
/// mailbox message, without losing what the sender does with it.
///
/// The sender reports the rejections, and of those refused for their key's
/// declaration (`key-declaration-mismatch`) it keeps the keys waiting, to
/// send once the registries agree: the cursor moves past the batch either
/// way, so such a key left out would be lost. Those are therefore all named,
/// in as many messages as they take; the other rejections only fill the room
/// left (they are counted in this side's `entriesRejected`, not named).
extension QueuedMessage {
    /// The stretch that names an acknowledgement frame carrying only rejections
    /// that did not fit their batch's acknowledgement: past any stream position
    /// (and other than the markers' and the repair batch's), so that it moves
    /// no cursor in any build, while every build takes its refused keys as it
    /// takes an acknowledgement's.
    static let rejectionsRange = (after: Int64.max - 9, through: Int64.max - 8)

    /// The acknowledgement of the batch `(after, through]`: one message when
    /// its rejections take at most `maxRejectionBytes` (counted as
    /// `SyncMessage.Rejection.fittingAnAcknowledgement` counts them), else the
    /// refused-for-their-declaration ones spread over messages of
    /// `rejectionsRange` ahead of the acknowledgement proper, which comes last
    /// (the sender keeps those keys waiting before its cursor moves) and
    /// names what fits of the other rejections.
    static func acknowledgements(_ header: QueuedHeader, after: Int64, through: Int64, applied: Int,
                                 rejected: [SyncMessage.Rejection], maxRejectionBytes: Int) -> [QueuedMessage] {
        func size(_ r: SyncMessage.Rejection) -> Int { r.key.utf8.count + r.code.utf8.count + 2 * 10 }
        if rejected.reduce(0, { $0 + size($1) }) <= maxRejectionBytes {
            return [.ack(header, after: after, through: through, applied: applied, rejected: rejected)]
        }
        let waits = SyncError.Code.keyDeclarationMismatch.rawValue
        var chunks: [[SyncMessage.Rejection]] = [[]]
        var bytes = 0
        for rejection in rejected where rejection.code == waits {
            // At least one rejection in each message, however long.
            if bytes + size(rejection) > maxRejectionBytes, !chunks[chunks.count - 1].isEmpty {
                chunks.append([])
                bytes = 0
            }
            chunks[chunks.count - 1].append(rejection)
            bytes += size(rejection)
        }
        for rejection in rejected where rejection.code != waits {
            guard bytes + size(rejection) <= maxRejectionBytes else { break }
            chunks[chunks.count - 1].append(rejection)
            bytes += size(rejection)
        }
        let last = chunks.removeLast()
        return chunks.map { .ack(header, after: rejectionsRange.after, through: rejectionsRange.through, applied: 0, rejected: $0) }
            + [.ack(header, after: after, through: through, applied: applied, rejected: last)]
    }
}

extension MailboxReplicator {
    /// The bytes of rejections one acknowledgement of this mailbox names at
    /// most: `SyncMessage.maxRejectionBytes`, as live, and half a message of
    /// this mailbox (the rest is room for the header, sealing and lengths).
    var maxQueuedRejectionBytes: Int {
        max(1, min(SyncMessage.maxRejectionBytes, mailbox.limits.maxMessageBytes / 2))
    }

    /// Posts the acknowledgement of the batch `(after, through]` that `plan`
    /// applied (`QueuedMessage.acknowledgements`), each message in the
    /// acknowledgements' reserve.
    func postAcknowledgement(after: Int64, through: Int64, of plan: ApplyPlan, into report: inout QueuedDeliveryReport) throws {
        for ack in QueuedMessage.acknowledgements(header, after: after, through: through, applied: plan.applied, rejected: plan.rejected,
                                                  maxRejectionBytes: maxQueuedRejectionBytes) {
            try postOwn(ack.frame(), reserve: true)
            onPost?(ack)
            report.messagesPosted += 1
        }
    }
}

import Synchronization
import SyncTransport

/// The mailboxes a store posts queued batches through in this process
/// (`MailboxReplicator` registers its own). A live re-baseline notice takes
/// back, from the spool of the watch it goes to, the batches it supersedes
/// before it is sent: a watch that reads its mailbox right after the notice
/// finds none of them. Posting and taking back exclude each other, so a round
/// that read the generation before the notice cannot post a batch of it after.
final class QueuedSpools: Sendable {
    private struct Registered: Sendable {
        weak var mailbox: Mailbox?
    }

    private let spools = Mutex<[ObjectIdentifier: Registered]>([:])
    private let posting = Mutex<Void>(())

    func register(_ mailbox: Mailbox) {
        spools.withLock { spools in
            spools = spools.filter { $0.value.mailbox != nil }
            spools[ObjectIdentifier(mailbox)] = Registered(mailbox: mailbox)
        }
    }

    /// Runs `body` (a round's posting) while no notice takes batches back.
    func whilePosting<Result>(_ body: () throws -> Result) throws -> Result {
        try posting.withLock { _ in try body() }
    }

    /// Takes back, from each registered spool whose watch is `peer`, the
    /// batches of `store` of another generation than `peer`'s current one.
    func withdrawSuperseded(for peer: UInt32, of store: SyncStore) throws {
        let mailboxes = spools.withLock { $0.values.compactMap(\.mailbox) }
        guard !mailboxes.isEmpty else { return }
        try posting.withLock { _ in
            let generation = try store.rebaselineGeneration(for: peer)
            for mailbox in mailboxes where try store.queuedPeer(role: .watch, epoch: mailbox.pairingEpoch)?.node == peer {
                try MailboxReplicator.withdraw(from: mailbox, batchesOf: store.nodeID, outside: generation)
            }
        }
    }
}

extension MailboxReplicator {
    /// Takes back the batches `node` posted to `mailbox` that the peer has not
    /// read, of another generation than `generation` (the repair batch stays),
    /// and with them the queued re-baseline they were the baseline of (its
    /// announcement, notice and caught-up marker): acted on without its
    /// baseline, its marker would remove what the phone still has.
    static func withdraw(from mailbox: Mailbox, batchesOf node: UInt32, outside generation: Int64) throws {
        // The queued re-baseline being read (its messages still waiting), and whether its baseline is superseded.
        var rebaseline: [MailboxMessage] = []
        var superseded: Bool?
        for message in try mailbox.outgoingMessages() {
            guard let queued = try? QueuedMessage(frame: message.frame), queued.header.node == node else { continue }
            switch queued {
            case .caughtUpFollows:
                // Announced again right after its notice (a live notice's caught-up was owed): one re-baseline.
                let followsItsNotice = superseded == nil && rebaseline.count == 2  // [announcement, notice]
                if followsItsNotice { rebaseline.append(message) } else { rebaseline = [message] }
                superseded = nil
            case .rebaseline:
                rebaseline.append(message)
            case .batch(_, _, let through, _) where through != repairRange.through:
                let isSuperseded = QueuedStreamPosition.position(through, generation: generation) == nil
                if superseded == nil { superseded = isSuperseded }
                if isSuperseded { try mailbox.withdraw(message) }
            case .caughtUp:
                if superseded == true { for taken in rebaseline + [message] { try mailbox.withdraw(taken) } }
                rebaseline = []
                superseded = nil
            default:
                break
            }
        }
        // A baseline whose marker was not posted yet.
        if superseded == true { for taken in rebaseline { try mailbox.withdraw(taken) } }
    }
}

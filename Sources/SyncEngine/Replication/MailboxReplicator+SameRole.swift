import SyncTransport

/// Two ends of one mailbox opened with the same role (two phones, or two
/// watches): each reads only what the other role posts, so both post to one
/// spool no one reads, and nothing is delivered either way. A live session
/// refuses such a peer at its hello; through the mailbox the sign is in the
/// outbox: a message of this role written by another node. Nothing is taken
/// or removed: the messages wait for a reader of the other role.
struct SameRoleOutbox {
    /// The outbox was read through this sequence (a message is opened once a process).
    var checkedThrough: UInt64 = 0
    /// The first message in the outbox under this store's current node id.
    var firstOwn: (node: UInt32, sequence: UInt64)?
    /// The node ids of this role already reported (once each a process).
    var told: Set<UInt32> = []
    /// The sequences this replicator posted and the node id each went under,
    /// not checked yet: known without opening them.
    var posted: [UInt64: UInt32] = [:]
    /// How many messages of the outbox the check opened (tests).
    var opened = 0
}

extension MailboxReplicator {
    /// Reports (an `.error` event and a log line, once per node id) another
    /// node of this role that posts to this end's outbox. Only a message
    /// posted after one of this store's current node id counts: those under a
    /// node id this store had before (`renewNodeID()`) all come before it.
    func noticeWritersOfThisRole() throws {
        let node = port.nodeID
        if let own = sameRole.firstOwn, own.node != node { sameRole.firstOwn = nil }
        // This replicator's own posts are known as posted: only the others are opened.
        let ours = sameRole.posted.filter { $0.key > sameRole.checkedThrough }
        var writers = ours.map { (sequence: $0.key, node: $0.value) }
        let others = try mailbox.outgoingMessages(after: sameRole.checkedThrough, skipping: Set(sameRole.posted.keys))
        sameRole.posted = [:]
        sameRole.opened += others.count
        for message in others {
            guard let header = (try? QueuedMessage(frame: message.frame))?.header, header.role == port.role else { continue }
            writers.append((message.sequence, header.node))
        }
        sameRole.checkedThrough = max(sameRole.checkedThrough, others.map(\.sequence).max() ?? 0, ours.keys.max() ?? 0)
        for writer in writers.sorted(by: { $0.sequence < $1.sequence }) {
            if writer.node == node {
                if sameRole.firstOwn == nil { sameRole.firstOwn = (node, writer.sequence) }
                continue
            }
            guard let own = sameRole.firstOwn, writer.sequence > own.sequence, sameRole.told.insert(writer.node).inserted else { continue }
            let error = SyncError.sameRoleMailbox(port.role, other: writer.node, spool: mailbox.outboxPath)
            reporter.logger.error("another end of this mailbox has this end's role", metadata: [
                "role": "\(port.role)", "node": "\(String(writer.node, radix: 16))", "spool": "\(mailbox.outboxPath)"])
            emit(.error(error))
        }
    }

    /// Posts `frame` to the outbox (`Mailbox.post`), noting its sequence for
    /// `noticeWritersOfThisRole`, which then need not open it.
    @discardableResult
    func postOwn(_ frame: Frame, reserve: Bool = false) throws -> UInt64 {
        let sequence = try mailbox.post(frame, reserve: reserve)
        sameRole.posted[sequence] = port.nodeID
        return sequence
    }
}

extension SyncError {
    /// Another end of this end's role posts to its mailbox: worded as a live hello's refusal of such a peer.
    static func sameRoleMailbox(_ role: DeviceRole, other node: UInt32, spool: String) -> SyncError {
        SyncError(.handshakeFailed, "a \(role) pairs only with a \(role.counterpart), but another end of this mailbox is also a \(role) (node \(String(node, radix: 16)) posts to \(spool) too): neither reads what the other posts, so nothing is delivered; open one end of the mailbox as .phone and the other as .watch (the messages waiting are kept for a \(role.counterpart) to read)")
    }
}

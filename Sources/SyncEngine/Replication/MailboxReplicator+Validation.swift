import SyncTransport

extension MailboxReplicator {
    /// Why `message` cannot be used here, if it cannot.
    /// A refusal is read whatever the peer's protocol or registry (they are often why it refused),
    /// and key declarations whatever the peer's registry (they are how registries are compared).
    /// A message of another key registry is used when a session with its sender
    /// compared that registry with this device's (`PeerRecord.registries`).
    func validate(_ message: QueuedMessage) throws -> SyncError? {
        let header = message.header
        let isRefusal = if case .refusal = message { true } else { false }
        // Key declarations, and a watch's node renewal notice, whatever the peer's registry.
        let isDeclarations = switch message { case .declarations, .renewsNodeID: true; default: false }
        if header.role != port.role.counterpart {
            return SyncError(.protocolViolation, "a queued message from a \(header.role) reached a \(port.role)")
        }
        if header.pairingEpoch != configuration.pairingEpoch {
            return SyncError(.pairingMismatch, "a queued message of pairing \(PeerText.escaped(header.pairingEpoch, maxLength: 64)) reached pairing \(configuration.pairingEpoch)")
        }
        if header.node == port.nodeID {
            // As a live hello with it is refused: recorded as the peer, this store would take its own changes for the peer's.
            return SyncError(.handshakeFailed, "a queued message names this store's own node id \(String(header.node, radix: 16)) as its sender; a store cannot sync with a copy of itself")
        }
        if isRefusal { return nil }
        // The sender speaks its message's version and maybe newer ones; this build reads
        // any message written for a version it knows (older builds named their newest).
        if header.protocolVersion < 1 || header.protocolVersion > configuration.protocolRange.upperBound {
            return SyncError(.unsupportedVersion,
                             "a queued message needs protocol \(header.protocolVersion) or newer; this build speaks \(configuration.protocolRange.lowerBound)...\(configuration.protocolRange.upperBound); update this app")
        }
        let ours = ourFingerprint
        if header.registryFingerprint != ours, !isDeclarations {
            let compared = try knownSender(header).map { $0.registries == ours + header.registryFingerprint } ?? false
            // A peer this store forgot (unseen past the horizon) keeps the comparison made with it.
            if !compared, try port.forgottenRegistries(of: header.node) != ours + header.registryFingerprint {
                return SyncError(.keyDeclarationMismatch,
                                 "a queued message was written with another key registry (its declarations differ from this device's), not compared with this one yet; this device posts its key declarations for the sender to compare, after which the keys declared alike go on (update both apps to the same registry for the others)")
            }
        }
        return nil
    }

    /// On a watch: whether a queued batch of `peer` ending at `through` was
    /// posted in a generation older than the one the phone's last live
    /// re-baseline notice started (protocol 4; the repair batch never is).
    func postedBeforeALiveRebaseline(_ through: Int64, from peer: UInt32) throws -> Bool {
        guard port.role == .watch, through != Self.repairRange.through,
              let live = try port.liveRebaselineGeneration(from: peer) else { return false }
        return QueuedStreamPosition.isOfOlderGeneration(through, than: live)
    }

    /// Whether an acknowledgement through `through` stays within this store's
    /// stream. One past it (a buggy or hostile peer; or a power cut that lost
    /// the stream's tail after it was posted) moves no cursor: a cursor past
    /// the stream would skip the changes written next, and a reopened store
    /// would number them after it, past what a queued batch can name. What
    /// the cursor has not passed is posted again, which the peer applies idempotently.
    func acknowledgesOnlyWhatWasWritten(_ through: Int64) throws -> Bool {
        let written = try port.streamPosition()
        guard through > written else { return true }
        reporter.logger.warning("the peer acknowledged queued changes past this store's stream; the cursor stays, what follows it is posted again",
                                metadata: ["through": "\(through)", "stream": "\(written)"])
        return false
    }

    /// Keeps a message that cannot be used aside, tells the peer (best effort), reports it.
    func setAside(_ message: MailboxMessage, _ error: SyncError, into report: inout QueuedDeliveryReport) throws {
        try mailbox.setAside(message, because: error.description)
        report.refused.append(error)
        emit(.error(error))
        if message.frame.type != QueuedMessage.MessageType.refusal.rawValue {
            let refusal = QueuedMessage.refusal(header, code: error.code.rawValue, message: error.message)
            // Counted among the messages posted (the round's report, its `queued` event) when it went.
            if (try? postOwn(refusal.frame(), reserve: true)) != nil {
                onPost?(refusal)
                report.messagesPosted += 1
            }
        }
    }
}

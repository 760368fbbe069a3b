import SyncTransport

extension SyncError {
    /// What an error frame tells the peer of this error, which ended the
    /// session here. An error about what the peer sent (a message, its hello,
    /// its node id, its pairing), or that the peer must act on, keeps its
    /// words: they name what the peer sent and what this side expected. An
    /// error of this device's own (its store, its disk, its keys) says what it
    /// means for the peer, and nothing of this device: the store's path and
    /// SQLite's words stay in this side's error event.
    var messageForPeer: String {
        switch code {
        case .malformedMessage, .protocolViolation, .handshakeFailed, .pairingMismatch, .nodeIDConflict, .tooManyPeers,
             .keyDeclarationMismatch, .unsupportedVersion, .replicationLocked:
            return message
        case .storageFull:
            return "its storage is full: it stored nothing more of this session, and what it did not acknowledge goes again once it has room"
        default:
            return "its store could not go on with the session (\(code)); the details stay on that device"
        }
    }
}

extension SyncError {
    /// Of the entries a peer's acknowledgement refused, the most the `.error` event names.
    static let maxNamedRefusals = 16

    /// The `.error` event for entries the peer refused in an acknowledgement:
    /// how many, and the first `maxNamedRefusals` by key and code in the
    /// peer's words, escaped (`PeerText`) and bounded. They went into the
    /// event as they came, every one of them.
    static func refusedByPeer(_ rejected: [SyncMessage.Rejection]) -> SyncError {
        let named = rejected.prefix(maxNamedRefusals).map { "\(PeerText.escaped($0.key)) (\(PeerText.escaped($0.code, maxLength: 64)))" }
        let more = rejected.count > named.count ? ", and \(rejected.count - named.count) more" : ""
        return SyncError(.protocolViolation, "the peer refused \(rejected.count) entries: \(named.joined(separator: ", "))\(more)")
    }
}

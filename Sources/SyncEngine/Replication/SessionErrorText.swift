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

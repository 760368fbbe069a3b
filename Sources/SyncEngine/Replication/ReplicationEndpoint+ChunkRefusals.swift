import SyncTransport

/// A large value the receiver refuses for good: the receiver names the code
/// in its chunk acknowledgement (protocol 7), and the sender reports it as it
/// reports an entry a batch's acknowledgement refused (`SyncError.refusedByPeer`).
extension ReplicationEndpoint {
    /// Why a chunk's entry is refused before its size and version are looked
    /// at, in `ApplyPlanner`'s words and order: a key with a NUL, a key not
    /// declared, one declared differently by the two sides, one the peer may
    /// not send or sent in another encoding. Nil when it may come.
    func chunkKeyRefusal(_ entry: WireEntry, peer: ReplicationSession.Peer) -> String? {
        if KeyName.containsNUL(entry.key) { return SyncError.Code.invalidKey.rawValue }
        guard let descriptor = port.registry.descriptor(forEntry: entry.key) else { return SyncError.Code.unknownKey.rawValue }
        if peer.mismatchedKeys.contains(descriptor.name) { return SyncError.Code.keyDeclarationMismatch.rawValue }
        guard descriptor.replicates(from: peer.role), descriptor.encoding == entry.encoding else { return ApplyPlanner.policyViolation }
        return nil
    }

    /// Whether the store holds `entry`'s very value, or a newer version (one
    /// within the version bound): a value over `maxValueSize` taken before
    /// the limit shrank, coming again, is not refused (as in a batch,
    /// `ApplyPlanner`); it is acknowledged as held.
    func holdsAlready(_ entry: WireEntry, value: SyncMessage.ChunkedValue) throws -> Bool {
        guard let local = try port.localVersion(forKey: entry.key), local.packed <= port.versionBound(), local >= entry.version else { return false }
        return try local > entry.version || port.holdsValue(forKey: entry.key, size: value.totalSize, checksum: value.totalChecksum)
    }

    /// What is wrong with a chunk acknowledgement for the session's protocol:
    /// one that names its value before protocol 5, or refuses it before 7.
    func chunkAckViolation(_ ack: SyncMessage.ChunkAck) -> SyncError? {
        guard let peer = session.knownPeer else { return nil }
        if ack.value != nil, peer.protocolVersion < SyncMessage.valueProtocol {
            return SyncError(.protocolViolation, "the peer sent a chunk acknowledgement that names its value in a session that negotiated protocol \(peer.protocolVersion)")
        }
        if ack.refusal != nil, peer.protocolVersion < SyncMessage.refusalProtocol {
            return SyncError(.protocolViolation, "the peer sent a chunk acknowledgement that refuses its value in a session that negotiated protocol \(peer.protocolVersion)")
        }
        return nil
    }

    /// Takes a chunk acknowledgement: a complete one ends its transfer (its
    /// stream range is done with, the entry counts as sent, once), and one
    /// that refuses the value stops sending the chunks left and is reported.
    func takeChunkAck(_ ack: SyncMessage.ChunkAck) throws {
        resumeTransfer(after: ack)
        if ack.refusal != nil, let transfer = session.stream.transfer, ack.key == transfer.key, ack.version == transfer.entry.version,
           ack.value == SyncMessage.ChunkedValue(totalSize: transfer.bytes.count, totalChecksum: transfer.checksum) {
            session.stream.transfer = nil  // the chunks left would be refused too
        }
        for case .chunk(let key, let seq, _, _, _) in session.acknowledgeChunk(key: ack.key, version: ack.version, index: ack.index, value: ack.value)
        where ack.complete {
            // Every chunk in flight of a value refused or held already is acknowledged as complete: the first ends the transfer.
            guard let upper = session.stream.transferRanges.removeValue(forKey: StreamProgress.TransferID(key: key, seq: seq)) else { continue }
            if let upper { try complete(upper: upper) } else { try finishRepairIfDone() }
            count { $0.entriesSent += 1 }
            if let refusal = ack.refusal {
                emit(.error(SyncError.refusedByPeer([SyncMessage.Rejection(key: ack.key, code: refusal)])))
            }
        }
    }
}

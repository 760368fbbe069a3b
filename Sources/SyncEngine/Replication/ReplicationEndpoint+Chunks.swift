import Logging
import SyncTransport

/// Large values: sent and received in chunks, staged durably, applied whole.
extension ReplicationEndpoint {
    /// A large value coming in chunks: its key, its version and which value of
    /// the version it is (a resolver's merge gives a version two values).
    struct IncomingTransfer: Equatable {
        var key: String
        var version: HLCTimestamp
        var value: SyncMessage.ChunkedValue

        /// Whether `other` is this transfer: the same value of the version when
        /// acknowledgements name values (protocol 5), else the same version.
        func isSame(as other: IncomingTransfer, byValue: Bool) -> Bool {
            key == other.key && version == other.version && (!byValue || value == other.value)
        }
    }

    /// The value of each large value's version whose chunks this session
    /// staged last, and the values another value of their version replaced
    /// since (a resolver's merge): late copies of their chunks are passed over.
    struct ChunkValueLog {
        /// Versions and values remembered at most, each list; the oldest go first.
        static let capacity = 16
        private(set) var latest: [IncomingTransfer] = []
        private(set) var superseded: [IncomingTransfer] = []

        /// Notes a chunk of `transfer` staged: another value of its version staged before is superseded.
        mutating func staged(_ transfer: IncomingTransfer) {
            if let index = latest.firstIndex(where: { $0.key == transfer.key && $0.version == transfer.version }) {
                let before = latest.remove(at: index)
                if before.value != transfer.value, !superseded.contains(before) {
                    superseded.append(before)
                    if superseded.count > Self.capacity { superseded.removeFirst() }
                }
            }
            latest.append(transfer)
            if latest.count > Self.capacity { latest.removeFirst() }
        }

        func isSuperseded(_ transfer: IncomingTransfer) -> Bool { superseded.contains(transfer) }
    }

    /// Partly received large values a hello names at most (each with a key of up to 1 KiB).
    static let maxAnnouncedPartialTransfers = 64

    /// The staged transfers this side's hello names, so that the peer resumes
    /// them: a bounded few, those furthest along first. Every transfer a peer
    /// began and never finished stays staged (any number of them, within
    /// `maxStagedChunkBytes`); a hello that named them all outgrew what a
    /// frame may carry, and no session could start again.
    func announcedPartialTransfers() -> [PartialTransfer] {
        let staged = (try? port.partialTransfers()) ?? []
        guard staged.count > ReplicationEndpoint.maxAnnouncedPartialTransfers else { return staged }
        return Array(staged.sorted { $0.received > $1.received }.prefix(ReplicationEndpoint.maxAnnouncedPartialTransfers))
    }

    /// Starts sending a large value in chunks; `upper` is the stream position
    /// its range ends at (nil for a repair). A value changed since it was read
    /// is not sent (its newer change comes later in the stream).
    func startTransfer(_ row: OutboundRow, upper: Int64?) throws {
        guard let bytes = try port.largeValue(key: row.key, seq: row.seq) else {
            if let upper { try complete(upper: upper) }
            return
        }
        let checksum = Checksum.crc32(bytes)
        try checkOneValuePerVersion(row, value: SyncMessage.ChunkedValue(totalSize: bytes.count, totalChecksum: checksum))
        let count = (bytes.count + configuration.chunkSize - 1) / configuration.chunkSize
        var start = 0
        if let partial = session.knownPeer?.partialTransfers.first(where: { $0.key == row.key && $0.version == row.entry.version }) {
            start = min(partial.received, count - 1)
        }
        session.stream.transferRanges[StreamProgress.TransferID(key: row.key, seq: row.seq)] = .some(upper)
        let probes = start > 0 && (session.knownPeer?.protocolVersion ?? 1) >= SyncMessage.valueProtocol
        session.stream.transfer = StreamProgress.Transfer(upper: upper, key: row.key, seq: row.seq, entry: row.entry, bytes: bytes, count: count, next: start,
                                                          checksum: checksum, range: upper.map { session.stream.messageRange(through: $0, anchor: port.latestVersion()) },
                                                          resumedAt: probes ? start : nil)
    }

    /// Whether this session may send `value` of `row`'s version, another
    /// value of that version (a resolver's merge) having gone before; else
    /// it ends, and the next session sends the value whole, with nothing of
    /// the other on the link:
    /// - before protocol 5 a chunk acknowledgement names key, version and
    ///   index only, and a lossy link may deliver a copy of one late: a
    ///   session sends one value of a version at most, else a late copy of an
    ///   acknowledgement of the first value's chunk would be taken for the
    ///   second's chunk of that index (a `complete` one would end its transfer
    ///   and move the cursor past a value the peer never got);
    /// - on any protocol, a session that started over on a new hello of the
    ///   peer forgot what it had in flight: chunks of the other value left
    ///   then may still be on the link, and would reach the peer among the
    ///   new value's and replace those it staged.
    func checkOneValuePerVersion(_ row: OutboundRow, value: SyncMessage.ChunkedValue) throws {
        guard let peer = session.knownPeer else { return }
        let what = "the session ends so that the new value of \(PeerText.escaped(row.key)) at version \(row.entry.version) (a resolver's merge) goes whole in the next one"
        if session.chunksLeftOnTheLink.contains(where: { $0.key == row.key && $0.version == row.entry.version && $0.value != value }) {
            throw SyncError(.closed, "\(what): the session started over on a new hello of the peer while chunks of another value of that version were on their way")
        }
        guard peer.protocolVersion < SyncMessage.valueProtocol else { return }
        if let sent = chunkValuesSent[row.key], sent.version == row.entry.version, sent.value != value {
            throw SyncError(.closed, "\(what): a peer of protocol \(peer.protocolVersion) acknowledges chunks by key, version and index only, and this session sent another value of that version")
        }
        if chunkValuesSent.count >= Self.maxValuesSentRemembered { chunkValuesSent.removeAll() }
        chunkValuesSent[row.key] = (row.entry.version, value)
    }

    /// Large values whose version and value a session of a peer before protocol 5 remembers at most.
    static let maxValuesSentRemembered = 4_096

    /// The acknowledgement of the chunk a transfer resumed at (protocol 5):
    /// the transfer goes on after the chunks of its value the receiver holds
    /// (from chunk 0 when those it held were of another value of the version),
    /// or stops when the value is done with.
    func resumeTransfer(after ack: SyncMessage.ChunkAck) {
        guard var transfer = session.stream.transfer, let resumedAt = transfer.resumedAt, ack.index == resumedAt,
              ack.key == transfer.key, ack.version == transfer.entry.version,
              ack.value == SyncMessage.ChunkedValue(totalSize: transfer.bytes.count, totalChecksum: transfer.checksum) else { return }
        transfer.resumedAt = nil
        if ack.complete {
            session.stream.transfer = nil
            return
        }
        if let staged = ack.staged { transfer.next = min(max(0, staged), transfer.count - 1) }
        session.stream.transfer = transfer
    }

    func sendChunk(_ t: inout StreamProgress.Transfer, now: Int64) -> Frame {
        let low = t.next * configuration.chunkSize
        let slice = Array(t.bytes[low..<min(t.bytes.count, low + configuration.chunkSize)])
        var entry = t.entry
        entry.value = nil
        entry.deleted = false
        let chunk = SyncMessage.Chunk(entry: WireEntry(key: entry.key, version: entry.version, base: entry.base, deleted: false, encoding: entry.encoding, value: []),
                                      totalSize: t.bytes.count, totalChecksum: t.checksum, index: t.next, count: t.count,
                                      checksum: Checksum.crc32(slice), bytes: slice, range: t.range)
        let frame = session.sendChunk(chunk, seq: t.seq, now: now).frame(protocolVersion: session.knownPeer?.protocolVersion ?? 1)
        count {
            $0.chunksSent += 1
            $0.bytesSent += frame.payload.count
        }
        emit(.chunk(key: t.key, index: t.next, count: t.count, outgoing: true))
        t.next += 1
        return frame
    }

    /// Drops the staged chunks of `entry`'s version (and older ones) and returns
    /// the error that ends the session: only a new session sends the value whole.
    private func droppingStagedChunks(of entry: WireEntry, because reason: String) throws -> SyncError {
        try port.discardStagedChunks(key: entry.key, through: entry.version)
        return SyncError(.malformedMessage, "\(reason); the staged chunks were dropped and the value goes whole in the next session")
    }

    /// What is inconsistent in a chunk's fields, if anything. The sender cuts
    /// a value of `totalSize` bytes into `count` chunks of one size `c` (the
    /// last one shorter), so `c * (count - 1) < totalSize <= c * count`.
    static func chunkProblem(_ chunk: SyncMessage.Chunk) -> String? {
        let total = chunk.totalSize, count = chunk.count, size = chunk.bytes.count
        if chunk.entry.deleted { return "a chunk cannot carry a delete" }
        if !(chunk.entry.value ?? []).isEmpty { return "a chunk's entry must not carry an inline value" }
        guard total >= 1 else { return "the announced total size is 0" }
        guard count >= 1, count <= total else { return "\(count) chunks cannot hold \(total) bytes" }
        // Each chunk is a staged row (its key and fields): chunks of a few bytes would stage far more
        // than `maxStagedChunkBytes` (which counts value bytes) lets through, and no sender cuts them.
        guard count - 1 <= (total - 1) / ReplicationConfiguration.minimumChunkSize else {
            return "\(count) chunks of a value of \(total) bytes are smaller than the \(ReplicationConfiguration.minimumChunkSize) bytes a sender cuts"
        }
        guard chunk.index >= 0, chunk.index < count else { return "index out of range" }
        guard size >= 1, size <= total else { return "a chunk of \(size) bytes for a value of \(total) bytes" }
        if chunk.index < count - 1 {
            let (all, overflowAll) = size.multipliedReportingOverflow(by: count)
            let (before, overflowBefore) = size.multipliedReportingOverflow(by: count - 1)
            guard !overflowAll, !overflowBefore, before < total, total <= all else {
                return "\(count) chunks of \(size) bytes do not make a value of \(total) bytes"
            }
        } else if size > total - (count - 1) {
            return "the last chunk (\(size) bytes) leaves no room for the \(count - 1) before it in \(total) bytes"
        }
        return nil
    }

    /// A chunk acknowledgement, and whether it acknowledges a commit (then it
    /// goes out only once that commit is on stable storage).
    struct ChunkReply {
        var frame: Frame
        var restsOnCommit: Bool
        /// The value is done with: applied, or refused for good.
        var completes: Bool
    }

    func receiveChunk(_ chunk: SyncMessage.Chunk, peer: ReplicationSession.Peer) throws -> [ChunkReply] {
        let entry = chunk.entry
        let value = SyncMessage.ChunkedValue(totalSize: chunk.totalSize, totalChecksum: chunk.totalChecksum)
        // From protocol 5 on an acknowledgement names the value (and the chunks of it staged):
        // the sender tells a resolver's merge from the value before it at one version.
        let byValue = peer.protocolVersion >= SyncMessage.valueProtocol
        // A value refused for good: the acknowledgement completes it and, from protocol 7 on, names the code.
        func ack(complete: Bool, staged: Int = 0, restsOnCommit: Bool = false, refusal: SyncError.Code? = nil) -> ChunkReply {
            let message = SyncMessage.chunkAck(.init(key: entry.key, version: entry.version, index: chunk.index, complete: complete,
                                                     value: value, staged: staged, refusal: refusal?.rawValue))
            return ChunkReply(frame: message.frame(protocolVersion: peer.protocolVersion), restsOnCommit: restsOnCommit, completes: complete)
        }
        if let refusal = chunkKeyRefusal(entry, peer: peer) {
            count { $0.entriesRejected += 1 }
            return [ack(complete: true, refusal: SyncError.Code(refusal))]
        }
        guard try chunk.totalSize <= port.maxValueSize || holdsAlready(entry, value: value) else {
            // Refused for good from any chunk (the acknowledgement completes the transfer, and the
            // sender stops): counted and reported once, with its first chunk, or with the first of a
            // transfer resumed from chunks staged before the limit shrank, which are dropped (the
            // chunks sent before the acknowledgement came are refused too, not counted again).
            if try chunk.index == 0 || port.partialTransfers().contains(where: { $0.key == entry.key && $0.version == entry.version }) {
                count { $0.entriesRejected += 1 }
                emit(.error(SyncError.refusedAsTooLarge([(entry.key, Int(chunk.totalSize))], limit: port.maxValueSize)))
                try port.discardStagedChunks(key: entry.key, through: entry.version)
            }
            return [ack(complete: true, refusal: .valueTooLarge)]
        }
        if let problem = ReplicationEndpoint.chunkProblem(chunk) {
            throw SyncError(.malformedMessage, "chunk \(chunk.index) of \(entry.key): \(problem)")
        }
        let now = port.nowMilliseconds()
        if let refusal = SyncStore.versionRefusal(entry, bound: port.versionBound(), now: now) {
            count {
                $0.entriesRejected += 1
                $0.versionsRefused += 1
            }
            emit(.versionRefused(key: PeerText.escaped(refusal.key), aheadMilliseconds: refusal.aheadMilliseconds))
            return [ack(complete: true, refusal: .versionOutOfRange)]
        }
        // Held already, unless a re-baseline notice marked what is held: then the value is
        // taken again (its apply keeps the row and settles the mark; else the mark would remove it).
        // At the very version held, only the same value is: a resolver's merge gives a version two
        // values, and the other is taken (its apply joins the two), checked once per transfer.
        let transfer = IncomingTransfer(key: entry.key, version: entry.version, value: value)
        let isCurrent = receiving.map { $0.isSame(as: transfer, byValue: byValue) } ?? false
        if let local = try port.localVersion(forKey: entry.key), local >= entry.version, try port.rebaselineMark(forKey: entry.key) != local,
           try local > entry.version || !isCurrent
               && port.holdsValue(forKey: entry.key, size: chunk.totalSize, checksum: chunk.totalChecksum) {
            if isCurrent { receiving = nil }
            // This transfer's chunks go, and any older; those of a newer version held may be
            // another transfer's, under way, of a merge at that version: they stay. So do those
            // of the version held while another value of it comes (this chunk is a late copy).
            let anotherValueComes = byValue && receiving.map { $0.key == entry.key && $0.version == local && $0.value != value } ?? false
            if local == entry.version, !anotherValueComes {
                try port.discardStagedChunks(key: entry.key, through: local)
            } else {
                try port.discardStagedChunks(key: entry.key, before: local)
            }
            return [ack(complete: true, restsOnCommit: true)]  // the acknowledgement rests on that commit
        }
        if chunkValues.isSuperseded(transfer) {
            // A late copy of a chunk of a value whose staged chunks another value of its version
            // replaced in this session (a resolver's merge since: a sender moves on to the merge and
            // never back). Staged, it would drop the merge's chunks this side acknowledged, which never
            // come again. From protocol 5 on its acknowledgement names its value and answers only its
            // own chunk; before, an acknowledgement names key, version and index, and the sender would
            // take it for the merge's chunk of that index: none then.
            return byValue ? [ack(complete: false)] : []
        }
        guard Checksum.crc32(chunk.bytes) == chunk.checksum else {
            emit(.error(SyncError(.malformedMessage, "chunk \(chunk.index) of \(entry.key) failed its checksum; waiting for a resend")))
            return []
        }
        count { $0.chunksReceived += 1 }
        emit(.chunk(key: entry.key, index: chunk.index, count: chunk.count, outgoing: false))
        let staged: StagedChunks
        do {
            staged = try port.stageChunk(chunk)
        } catch let error as SyncError where error.code == .malformedMessage {
            throw try droppingStagedChunks(of: entry, because: error.message)  // more bytes than announced
        }
        if staged.replacedAnotherValue, !isCurrent, chunk.index > 0, !byValue {
            // The sender resumed from chunks staged in an earlier session, of another value of this
            // version (a resolver merged into it since): those before this one never come in this
            // session. (From protocol 5 on the acknowledgement says none are staged: they come.)
            throw try droppingStagedChunks(of: entry, because: "the transfer of \(entry.key) resumed from chunks of another value of its version")
        }
        chunkValues.staged(transfer)
        guard staged.contiguous >= chunk.count else {
            receiving = transfer
            return [ack(complete: false, staged: staged.contiguous)]
        }
        receiving = nil
        let bytes = try port.assembleChunks(key: entry.key, version: entry.version)
        guard bytes.count == chunk.totalSize, Checksum.crc32(bytes) == chunk.totalChecksum else {
            // Corrupt chunks (those of two values of one version never join): the sender has sent them all.
            throw try droppingStagedChunks(of: entry, because: "the chunks of \(entry.key) did not add up to the announced value")
        }
        var complete = entry
        complete.value = bytes
        _ = try apply([complete], from: peer, completing: ChunkedVersion(key: entry.key, version: entry.version), reportsConflicts: false)
        return [ack(complete: true, staged: chunk.count, restsOnCommit: true)]
    }
}

import SyncTransport

/// How many entries a batch may hold, and how large its acknowledgement may
/// grow: both bounded by what a legitimate sender produces, so that a small
/// frame cannot announce (and make this side allocate and plan) far more.
extension SyncMessage {
    /// Entries a batch (live, of any payload schema, or queued) may announce
    /// at most; a batch announcing more is refused with `malformed-message`
    /// before anything is allocated for its entries.
    ///
    /// A sender stops a batch once its entries count `maxBatchBytes` (at
    /// most 2 MiB) of keys and values, each entry counting its key (at least
    /// a byte), its value and 32 bytes more: at most 2 MiB / 33 + 1 = 63,551
    /// entries. It never puts more than `ReplicationConfiguration.maxBatchEntries`
    /// in one (at most `maxSentBatchEntries`, which also bounds its repair
    /// batches, read without a byte budget). Builds before those bounds
    /// (2026-11-28) sent 2,048 entries at most unless configured otherwise.
    /// Twice the most a sender makes leaves margin.
    static let maxBatchEntries = 131_072
    /// The most entries a sender puts in one batch (`ReplicationConfiguration.maxBatchEntries`).
    static let maxSentBatchEntries = 65_536
    /// The bytes the rejections of one acknowledgement may take at most (keys
    /// and codes with their lengths): an acknowledgement of any batch this
    /// side accepts fits a frame (4 MiB on the wire, 8 MiB inflated) even
    /// uncompressed. Rejections past it are counted, not named (the sender
    /// only reports them).
    static let maxRejectionBytes = 1 << 20

    /// The acknowledgement of batch `batchID`: its rejections as far as
    /// `maxRejectionBytes` allow.
    static func acknowledgement(of batchID: UInt64, applied: Int, rejected: [Rejection]) -> SyncMessage {
        .ack(Ack(batchID: batchID, applied: applied, rejected: Rejection.fittingAnAcknowledgement(rejected)))
    }
}

extension SyncMessage.Rejection {
    /// The first of `rejected` whose keys and codes (with their length
    /// prefixes) take at most `SyncMessage.maxRejectionBytes`.
    static func fittingAnAcknowledgement(_ rejected: [SyncMessage.Rejection]) -> [SyncMessage.Rejection] {
        var bytes = 0
        for (i, rejection) in rejected.enumerated() {
            bytes += rejection.key.utf8.count + rejection.code.utf8.count + 2 * 10
            if bytes > SyncMessage.maxRejectionBytes { return Array(rejected.prefix(i)) }
        }
        return rejected
    }
}

extension ByteReader {
    /// A batch's entry count: at most `SyncMessage.maxBatchEntries` and at most the bytes left.
    mutating func readBatchCount() throws -> Int {
        let count = try readCount()
        guard count <= SyncMessage.maxBatchEntries else {
            throw SyncError(.malformedMessage, "a batch announces \(count) entries, more than the \(SyncMessage.maxBatchEntries) a batch may hold")
        }
        return count
    }
}

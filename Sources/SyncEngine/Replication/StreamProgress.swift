import SyncTransport

/// What one session has read of the stream of changes and what the peer has
/// acknowledged of it, pure: the cursor moves over the prefix of read ranges
/// whose messages were all acknowledged. Part of the established state, so a
/// new (or restarted) session starts it afresh from the recorded cursor.
struct StreamProgress: Sendable {
    /// A stretch of the stream read by this session, ending at `upper`.
    struct ReadRange: Sendable, Equatable {
        var upper: Int64
        var done: Bool
    }

    /// A large value in flight: a key at a change sequence.
    struct TransferID: Hashable, Sendable {
        var key: String
        var seq: Int64
    }

    /// A large value being sent in chunks.
    struct Transfer: Sendable {
        /// The stream position its range ends at; nil for a repair.
        var upper: Int64?
        var key: String
        var seq: Int64
        var entry: WireEntry
        var bytes: [UInt8]
        var count: Int
        var next: Int
        var checksum: UInt32
        /// The stream range its chunks carry (nil for a repair).
        var range: SyncMessage.StreamRange?
        /// The chunk a resumed transfer started at, while its acknowledgement
        /// is awaited (protocol 5): it says how many chunks of this value the
        /// receiver holds, and the transfer goes on from there (the chunks the
        /// peer's hello named may be of another value of the version).
        var resumedAt: Int? = nil

        /// Whether the transfer waits for the acknowledgement of the chunk it resumed at.
        var awaitsResumeAck: Bool { resumedAt.map { next > $0 } ?? false }
    }

    /// The peer's cursor: every change of the stream up to it was acknowledged.
    var cursor: Int64 = 0
    /// How far this session has read the stream (sent, or passed over).
    var scan: Int64 = 0
    /// Where the next message's stream range begins: the end of the last
    /// range a message of this session carried (ranges passed over join the
    /// next one), or the cursor the session started from.
    var chain: Int64 = 0
    /// What was read, in order; the cursor moves over the acknowledged prefix.
    var ranges: [ReadRange] = []
    /// The stream position each batch in flight ends at, by batch id.
    var batchRanges: [UInt64: Int64] = [:]
    /// The stream position each transfer in flight ends at (nil for a repair).
    var transferRanges: [TransferID: Int64?] = [:]
    /// Changes of keys whose declarations agree again after a mismatch, sent
    /// whatever the cursor says (they were passed over while they differed).
    var repairRows: [OutboundRow] = []
    var repairBatches: Set<UInt64> = []
    var repairedNames: Set<String> = []
    var transfer: Transfer?
    /// The sync round under way (progress events): batches sent in it, how
    /// many it sends (counted when it began, 0 when nobody listened then), and
    /// the stream position it ends at (changes after it go to the next round).
    var batchNumber = 0
    var batchTotal = 0
    var inRound = false
    var roundEnd: Int64?

    init(cursor: Int64 = 0) {
        self.cursor = cursor
        scan = cursor
        chain = cursor
    }

    /// The session starts after `position` instead (the phone's receipt
    /// said it has the stream through there), before anything was read.
    mutating func start(after position: Int64) {
        guard ranges.isEmpty, scan == cursor, position > cursor else { return }
        cursor = position
        scan = position
        chain = position
    }

    /// The stream range of a message that completes the stream through
    /// `upper`, read when the clock was at `anchor`: from the end of the previous message's.
    mutating func messageRange(through upper: Int64, anchor: Int64) -> SyncMessage.StreamRange {
        defer { chain = upper }
        return SyncMessage.StreamRange(lower: chain, upper: upper, anchor: anchor)
    }

    /// The stream was read (sent or passed over) up to `upper`.
    mutating func read(through upper: Int64) {
        scan = upper
        ranges.append(ReadRange(upper: upper, done: false))
    }

    /// The range ending at `upper` was acknowledged: the cursor moves over
    /// every acknowledged range at the front. Returns the new cursor to
    /// record, if it moved.
    mutating func complete(upper: Int64) -> Int64? {
        if let index = ranges.firstIndex(where: { $0.upper == upper }) { ranges[index].done = true }
        var reached: Int64?
        while let first = ranges.first, first.done {
            reached = first.upper
            ranges.removeFirst()
        }
        guard let reached, reached > cursor else { return nil }
        cursor = reached
        return reached
    }

    /// Whether every repaired key's changes were just acknowledged (once):
    /// then the peer's record of mismatched keys is what this session found.
    mutating func finishRepairIfDone() -> Bool {
        guard !repairedNames.isEmpty, repairRows.isEmpty, repairBatches.isEmpty,
              !transferRanges.values.contains(where: { $0 == nil }) else { return false }
        repairedNames = []
        return true
    }
}

/// How far a receiver holds the peer's stream without a gap, from the
/// stream ranges of the peer's messages (protocol 3), pure. A range whose
/// start is past `through` (an earlier message not here yet) waits in
/// `pending` until the gap closes; a few are kept, the rest forgotten (the
/// figure only ever lags, which is safe: the peer then sends more again).
struct ReceivedStream: Sendable, Equatable {
    /// Every change of the peer's stream through here is received and applied.
    var through: Int64
    /// The newest anchor of what was received through `through`: no change
    /// there had a newer version when the peer read it.
    var anchor: Int64
    /// What the store has recorded (`ReplicationPort.receivedThrough(from:)`).
    var stored: Int64
    var pending: [SyncMessage.StreamRange] = []
    static let maxPending = 64

    init(through: Int64 = 0, anchor: Int64 = 0) {
        self.through = through
        self.anchor = anchor
        stored = through
    }

    /// A message completing `range` was applied (or refused for good). A
    /// range whose anchor is past `anchorBound` (the largest version this
    /// side accepts now) is not noted: no peer's stream was read then, and a
    /// receipt that vouched for it would make the peer skip what it writes next.
    mutating func note(_ range: SyncMessage.StreamRange, anchorBound: Int64) {
        guard range.upper > through, range.anchor <= anchorBound else { return }
        pending.append(range)
        if pending.count > ReceivedStream.maxPending { pending.removeFirst() }
        closeGaps()
    }

    /// The peer's cursor for this side, and its clock when it said so: what
    /// it acknowledged was received.
    mutating func note(acknowledgedThrough position: Int64, anchor peerAnchor: Int64, anchorBound: Int64) {
        guard position > through, peerAnchor <= anchorBound else { return }
        through = position
        anchor = max(anchor, peerAnchor)
        closeGaps()
    }

    private mutating func closeGaps() {
        while let index = pending.firstIndex(where: { $0.lower <= through }) {
            if pending[index].upper > through {
                through = pending[index].upper
                anchor = max(anchor, pending[index].anchor)
            }
            pending.remove(at: index)
        }
    }
}

/// Tuning of a replication session. The defaults suit a phone and a watch.
public struct ReplicationConfiguration: Sendable {
    /// Identifies the pairing; both peers must agree. Derived from the pairing
    /// secret on TCP (`PairingSecret.epoch`). A new epoch re-baselines.
    public var pairingEpoch: String
    /// The session protocol versions this build speaks; a session uses the
    /// highest both peers announce. 1 is the first release; 2 sends batches as
    /// columns (smaller once deflated) and adds caught-up notices (a side is
    /// idle only once the peer has nothing more for it) and manual requests
    /// (`SyncPeer.requestManualChanges()`); 3 adds stream ranges and receipts
    /// (a write whose acknowledgement was lost is not sent again); 4 has a
    /// re-baseline notice name its generation; 5 has a chunk acknowledgement
    /// name its value (a resolver's merge gives a version two values).
    /// `1...1` to `1...4` makes a node speak only those, as builds before
    /// them did.
    public var protocolRange: ClosedRange<UInt16> = 1...SyncMessage.highestProtocolVersion
    /// Entries per batch message at most (one transaction on each side): 1
    /// to 65,536 (a larger setting is taken as 65,536; a peer refuses a
    /// batch of more than 131,072 entries).
    public var maxBatchEntries = 2048 {
        didSet { maxBatchEntries = min(max(1, maxBatchEntries), SyncMessage.maxSentBatchEntries) }
    }
    /// Value bytes per batch message at most (before compression): 1 KiB to
    /// 2 MiB, so that a batch stays within what a peer's transport accepts
    /// (`FrameLimits`: 4 MiB on the wire); a larger setting is taken as 2 MiB.
    public var maxBatchBytes = 512 * 1024 {
        didSet { maxBatchBytes = min(max(maxBatchBytes, 1024), 2 << 20) }
    }
    /// Size of one chunk of a large value: 1 KiB to 1 MiB (a setting outside
    /// is taken as the nearest bound; 0 would divide by zero).
    public var chunkSize = 64 * 1024 {
        didSet { chunkSize = min(max(chunkSize, ReplicationConfiguration.minimumChunkSize), 1 << 20) }
    }
    /// The smallest chunk a sender cuts (but the last of a value): a receiver
    /// refuses a value announced in more chunks than chunks of this size make.
    static let minimumChunkSize = 1024
    /// Messages in flight without an acknowledgement (backpressure): 1 to
    /// 65,536 (a larger setting, such as `.max` for "no limit", is taken as 65,536).
    /// Many small batches may be in flight (single writes, each waiting for the
    /// peer's fsync before its acknowledgement); large ones are bounded by `maxBytesInFlight`.
    public var window = 16 {
        didSet { window = min(max(1, window), ReplicationConfiguration.maxWindow) }
    }
    /// The largest `window`: a session reads twice the window ahead of itself.
    static let maxWindow = 1 << 16
    /// The least time between two syncs of this device's WAL for the
    /// acknowledgements of one live session (each acknowledgement waits for
    /// its commits to be on stable storage). A batch after a quiet spell is
    /// synced at once; while batches keep arriving, those applied within the
    /// interval share one fsync and their acknowledgements go together, so
    /// a stream of single writes costs the receiver (a watch's flash and
    /// battery) at most one fsync per interval instead of one per write. It
    /// delays acknowledgements, never what the app sees: a received value is
    /// visible as soon as its transaction commits. Zero syncs each group as
    /// soon as the one before is done.
    public var acknowledgementSyncInterval: Duration = .milliseconds(1) {
        didSet { if acknowledgementSyncInterval < .zero { acknowledgementSyncInterval = .zero } }
    }
    /// Value and key bytes in flight without an acknowledgement at most: four
    /// full batches (`maxBatchBytes`); chunks (64 KB) are bounded by `window`. A message always goes when nothing is in flight.
    public var maxBytesInFlight = 2 * 1024 * 1024
    /// Frames read from the connection ahead of the session: the peer's whole
    /// window (its batches or chunks), plus as many acknowledgements of ours.
    var readAheadFrames: Int { 2 * max(1, window) }
    /// Whether this device releases its manual changes when the peer (a node
    /// id) asks for them (`SyncPeer.requestManualChanges()`), as its own
    /// `sync()` would. Allowed by default: the manual lane saves traffic, it
    /// does not hide anything from the paired peer, which gets those changes
    /// at this device's next `sync()` anyway. Return false to decline (the
    /// peer gets a declined answer; nothing is released).
    public var answersManualRequests: @Sendable (_ peer: UInt32) -> Bool = { _ in true }
    /// How local commits made in a burst share batches (`SyncPeer`); nil
    /// sends each commit at once, as far as the window allows.
    public var burstCoalescing: BurstCoalescing? = BurstCoalescing()
    /// How long a device waits after a session or a round of queued delivery
    /// failed because a device's storage is full (`storage-full`: this one's,
    /// or the peer's): before dialing again (`SyncPeer.maintainConnection`)
    /// and before the next timed round (`runQueued`). A local write that
    /// commits (there is room again) ends the wait at once. Each session
    /// with a full peer sends its batches again for nothing: redialing at
    /// the reconnect backoff's pace would cost a watch radio and battery
    /// while its storage stays full.
    public var storageFullRetryInterval: Duration = .seconds(60)
    /// Over a lossy connection, how long a hello may go unanswered before it
    /// is sent again. Over one that delivers every frame (TCP) it goes once:
    /// a second would make the peer start the session over.
    public var helloRetryMilliseconds: Int64 = 1_000
    /// Over a connection that delivers every frame (TCP), how long the peer
    /// may leave our hello unanswered before the session fails with
    /// `timeout` and the connection is closed (a dialer then connects
    /// again): the other end accepted the connection but runs no session on
    /// it. Over a lossy connection the hello is resent for as long as the session runs.
    public var helloTimeoutMilliseconds: Int64 = 10_000
    /// In a session of protocol 3 or newer over a connection that delivers
    /// every frame (TCP), how long a watch waits for the phone's receipt (the
    /// first thing a phone sends after the hellos; the watch sends nothing
    /// before it) before the session fails with `timeout` and the connection
    /// is closed (a dialer then connects again). Over a lossy connection the
    /// phone sends its receipt again until it is acknowledged.
    public var receiptTimeoutMilliseconds: Int64 = 10_000
    /// Over a lossy connection, how long a message may go unacknowledged
    /// before it is sent again; each try waits one interval more, up to four
    /// while the peer is silent. `.max` never sends one again.
    public var retransmitMilliseconds: Int64 = 2_000

    /// Deliberate engine faults, for proving that tests and the simulator's
    /// checker can fail. Never set these in an app.
    @_spi(Testing) public var testingFaults = TestingFaults()

    public init(pairingEpoch: String = "unpaired") {
        self.pairingEpoch = pairingEpoch
    }
}

/// Deliberately broken behaviour, switched on only by tests (and the
/// simulator's `--inject-fault`). `@_spi(Testing)`: not part of the API.
@_spi(Testing)
public struct TestingFaults: Sendable, Equatable, Codable {
    /// Deletes are not replicated: tombstones are marked sent without sending them.
    public var skipTombstones = false
    /// Conflicts are won by whichever write arrives last, not by HLC order.
    public var lastArrivalWins = false
    /// Live sessions take keys the two registries declare differently as alike (and sync them).
    public var ignoreKeyMismatch = false
    /// A watch removes what a live re-baseline notice names at once instead of
    /// marking it: the app sees values go that the baseline then sets again.
    public var removeRebaselinedAtOnce = false

    public init(skipTombstones: Bool = false, lastArrivalWins: Bool = false, ignoreKeyMismatch: Bool = false,
                removeRebaselinedAtOnce: Bool = false) {
        self.skipTombstones = skipTombstones
        self.lastArrivalWins = lastArrivalWins
        self.ignoreKeyMismatch = ignoreKeyMismatch
        self.removeRebaselinedAtOnce = removeRebaselinedAtOnce
    }
}

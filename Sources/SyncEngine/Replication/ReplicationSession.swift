import SyncTransport

/// The replication session's protocol, as a pure state machine: no I/O, no
/// clock reads. Inputs are messages and times, one at a time; outputs are
/// actions that the shell (`ReplicationEndpoint`) performs (swift-nio's
/// `…StateMachine` structs are the model).
///
/// Its `state` is an enum whose cases carry what exists in them: there is
/// no established session without its peer, and no failed one without its error.
///
/// Handshake: each side sends a hello; a hello that is not a reply is
/// answered with one, so either side may (re)start. A side is established
/// once it has validated the peer's hello. Then batches and chunks go out in
/// a window of unacknowledged messages, each retransmitted after a timeout
/// that grows with its attempts up to `maxBackoffAttempts` intervals
/// (delivery is at-least-once; apply is idempotent). An acknowledgement
/// proves the link works and that messages sent before the acknowledged one
/// were probably lost: those go out again at the next tick, their backoff
/// reset (a fast retransmit). Any other message from the peer resets the
/// backoff too (a peer that talks is reachable).
struct ReplicationSession {
    struct Identity: Sendable, Equatable {
        var node: UInt32
        var role: DeviceRole
        var pairingEpoch: String
        var protocolRange: ClosedRange<UInt16>
        var declarations: [String]
        var fingerprint: [UInt8]
    }

    struct Peer: Sendable, Equatable {
        var node: UInt32
        var role: DeviceRole
        var protocolVersion: UInt16
        /// Keys declared differently on the two sides, by name.
        var mismatchedKeys: Set<String>
        var partialTransfers: [PartialTransfer]
        /// The fingerprint of the peer's key registry, from its hello.
        var registryFingerprint: [UInt8] = []
    }

    /// What one in-flight message carried, for acknowledgement bookkeeping.
    enum Payload: Sendable, Equatable {
        case batch([BatchItem])
        case chunk(key: String, seq: Int64, version: HLCTimestamp, index: Int, isLast: Bool)
        /// A re-baseline notice (`SyncStore+Tombstones`): acknowledged like a batch.
        case rebaseline
        /// This side's receipt (protocol 3): acknowledged like a batch.
        case receipt

        /// The case's name, for reports (never the entries: a batch holds thousands).
        var kind: String {
            switch self {
            case .batch: "batch"
            case .chunk: "chunk"
            case .rebaseline: "rebaseline"
            case .receipt: "receipt"
            }
        }
    }

    struct BatchItem: Sendable, Equatable {
        var key: String
        var seq: Int64
    }

    struct InFlight: Sendable {
        var message: SyncMessage
        var payload: Payload
        var sentAt: Int64
        var attempts: Int
        /// Value and key bytes it carries, counted against `maxBytesInFlight`.
        var bytes = 0
        /// Set by a fast retransmit: resend at the next tick.
        var dueNow = false
    }

    /// A session with a validated peer, and the messages it has in flight.
    struct Established: Sendable {
        var peer: Peer
        var inFlight: [UInt64: InFlight] = [:]
        /// In-flight chunks by key, version and index (their acknowledgements name them so).
        /// (The same chunk is in flight twice when its value's transfer began again
        /// under a newer change of the same version: one acknowledgement answers both.)
        var chunkKeys: [String: [UInt64]] = [:]
        /// What this session read of the stream and what the peer acknowledged.
        var stream = StreamProgress()
        /// Our caught-up notice while it waits for its acknowledgement.
        var caughtUpNotice: CaughtUpNotice?
        /// A caught-up notice went out since this side last sent data (the last one at `lastCaughtUpAt`).
        var announcedCaughtUp = false
        var lastCaughtUpAt: Int64 = 0
        /// The peer said it has nothing more for us (and sent no data since).
        var peerCaughtUp = false
        /// The highest id the peer sent data with (a batch, a re-baseline
        /// notice, a manual reply), and the id of its caught-up notice that
        /// counts: data numbered before it is a late duplicate.
        var peerDataID: UInt64 = 0
        var peerCaughtUpID: UInt64 = 0
    }

    /// A caught-up notice sent and not yet acknowledged (retransmitted like a batch).
    struct CaughtUpNotice: Sendable {
        var id: UInt64
        var sentAt: Int64
        var attempts: Int
    }

    /// The first protocol version with caught-up notices.
    static let caughtUpProtocol: UInt16 = 2

    enum State: Sendable {
        /// Not started.
        case idle
        /// Our hello is out (sent last at `lastHelloAt`); the peer's has not come.
        case awaitingHello(lastHelloAt: Int64)
        case established(Established)
        /// Ended by an error (ours or the peer's); `peer` if it had been established.
        case failed(SyncError, peer: Peer?)
        /// Ended without an error (the connection went away); `peer` if it had been established.
        case closed(peer: Peer?)
    }

    enum Action: Sendable, Equatable {
        case send(SyncMessage)
        case established(Peer)
        /// Send the error to the peer (when `notifyPeer`) and close the session.
        case fail(SyncError, notifyPeer: Bool)
    }

    let identity: Identity
    var helloRetryInterval: Int64
    var retransmitInterval: Int64
    var window: Int
    /// Value and key bytes in flight at most (a message always goes when nothing is in flight).
    var maxBytesInFlight = Int.max
    /// The longest wait between retransmissions, in `retransmitInterval`s.
    var maxBackoffAttempts = 4
    /// False over a transport that delivers every frame while connected:
    /// unacknowledged messages then wait for their acknowledgement or for the
    /// connection to fail, and are never sent twice in one session.
    var retransmits = true
    /// `TestingFaults.ignoreKeyMismatch`: keys declared differently are taken as alike.
    var ignoresKeyMismatch = false
    /// How long the peer may leave the hello unanswered before the session
    /// fails (nil: it is resent for as long as the session runs). Set over a
    /// transport that delivers every frame: a peer that does not answer
    /// there is not running a session on that connection.
    var helloTimeout: Int64?
    /// When `start` sent the first hello.
    private var startedAt: Int64 = 0

    private(set) var state: State = .idle
    /// Message ids go on across a restart of the peer (an old acknowledgement never matches a new message).
    private var nextBatchID: UInt64 = 1
    /// Staged transfers this side can resume, announced in its hello.
    var partialTransfers: [PartialTransfer] = []

    init(identity: Identity, helloRetryInterval: Int64 = 1_000, retransmitInterval: Int64 = 2_000, window: Int = 4) {
        self.identity = identity
        self.helloRetryInterval = helloRetryInterval
        self.retransmitInterval = retransmitInterval
        self.window = window
    }

    var established: Established? { if case .established(let established) = state { established } else { nil } }
    /// Whether time alone can make `tick` act: the hello awaits its answer
    /// (resent, or timed out), or sent messages wait to be sent again.
    var waitsOnTimers: Bool {
        switch state {
        case .awaitingHello: true
        case .established(let established): retransmits && (!established.inFlight.isEmpty || established.caughtUpNotice != nil)
        case .idle, .failed, .closed: false
        }
    }
    /// What was in flight of large values when the session last started over (`noteChunksLeftOnTheLink`).
    private(set) var chunksLeftOnTheLink: [ChunksLeftOnTheLink] = []
    var isEstablished: Bool { established != nil }
    /// The peer, while established.
    var peer: Peer? { established?.peer }
    /// The peer while established, and the one it had once it ended (for reports about it).
    var knownPeer: Peer? {
        switch state {
        case .established(let established): established.peer
        case .failed(_, let peer), .closed(let peer): peer
        case .idle, .awaitingHello: nil
        }
    }
    /// Why the session failed, once it has.
    var failure: SyncError? { if case .failed(let error, _) = state { error } else { nil } }
    /// Room in the window. Nothing more goes out while a re-baseline notice
    /// waits for its acknowledgement: the watch must act on it before the
    /// baseline arrives.
    var hasCapacity: Bool {
        guard let inFlight = established?.inFlight else { return false }
        guard inFlight.count < window, !inFlight.values.contains(where: { $0.payload == .rebaseline }) else { return false }
        return inFlight.isEmpty || inFlight.values.reduce(0, { $0 + $1.bytes }) < maxBytesInFlight
    }
    var isQuiet: Bool { established?.inFlight.isEmpty ?? true }
    /// Whether the peer has nothing more for us, as far as we know: it said
    /// so (protocol 2) and sent nothing since. A protocol-1 peer never says,
    /// so it counts as having nothing more.
    var peerHasNothingMore: Bool {
        guard let established else { return false }
        return established.peer.protocolVersion < ReplicationSession.caughtUpProtocol || established.peerCaughtUp
    }
    var inFlight: [UInt64: InFlight] { established?.inFlight ?? [:] }
    private var isOver: Bool {
        switch state {
        case .failed, .closed: true
        case .idle, .awaitingHello, .established: false
        }
    }

    /// Runs `body` on the established state in place (nil when not established).
    private mutating func withEstablished<Result>(_ body: (inout Established) -> Result) -> Result? {
        guard case .established(var established) = state else { return nil }
        state = .closed(peer: nil)  // the payload is uniquely referenced while `body` runs
        let result = body(&established)
        state = .established(established)
        return result
    }

    /// The established session's stream progress, moved out while it is
    /// modified (no copy of its rows or transfer bytes); a blank one otherwise.
    var stream: StreamProgress {
        get { established?.stream ?? StreamProgress() }
        _modify {
            var progress = withEstablished { established -> StreamProgress in
                defer { established.stream = StreamProgress() }
                return established.stream
            } ?? StreamProgress()
            defer { withEstablished { $0.stream = progress } }
            yield &progress
        }
    }

    func hello(isReply: Bool) -> SyncMessage {
        .hello(.init(protocolRange: identity.protocolRange, node: identity.node, role: identity.role, isReply: isReply,
                     pairingEpoch: identity.pairingEpoch, registryFingerprint: identity.fingerprint,
                     declarations: identity.declarations, partialTransfers: partialTransfers))
    }

    mutating func start(now: Int64) -> [Action] {
        state = .awaitingHello(lastHelloAt: now)
        startedAt = now
        return [.send(hello(isReply: false))]
    }

    /// Handles the peer's hello: validated, it establishes the session (a
    /// fresh one mid-session means the peer restarted: what was in flight is gone).
    mutating func receiveHello(_ hello: SyncMessage.Hello, now: Int64) -> [Action] {
        guard !isOver else { return [] }
        switch ReplicationSession.validate(local: identity, peer: hello) {
        case .failure(let error):
            state = .failed(error, peer: knownPeer)
            return [.fail(error, notifyPeer: true)]
        case .success(var validated):
            // One connection carries one peer: a hello of another node once established is refused
            // (its stream would be recorded as the first node's when the session ends).
            if isEstablished, let established = knownPeer, established.node != validated.node {
                let error = SyncError(.protocolViolation, "the peer's hello names node \(String(validated.node, radix: 16)) in a session established with node \(String(established.node, radix: 16)); a session has one peer")
                state = .failed(error, peer: established)
                return [.fail(error, notifyPeer: true)]
            }
            if ignoresKeyMismatch { validated.mismatchedKeys = [] }
            var actions: [Action] = []
            if !hello.isReply { actions.append(.send(self.hello(isReply: true))) }
            if !isEstablished || !hello.isReply {
                if let before = established { noteChunksLeftOnTheLink(before) }
                state = .established(Established(peer: validated))
                actions.append(.established(validated))
            } else {
                // The peer (re)established on a hello of ours (perhaps a late duplicate) and forgot
                // our caught-up notice: it gets a new one once we are caught up.
                withEstablished(ReplicationSession.sendsData)
            }
            return actions
        }
    }

    /// A large value's version and value whose chunks were unacknowledged
    /// when the session started over on a new hello of the peer (perhaps a
    /// late copy of its first): copies of those chunks, and of their
    /// acknowledgements, may still be on the link.
    struct ChunksLeftOnTheLink: Sendable, Equatable {
        var key: String
        var version: HLCTimestamp
        var value: SyncMessage.ChunkedValue
    }

    /// Values remembered in `chunksLeftOnTheLink` at most; the oldest go first.
    static let maxChunksLeftOnTheLink = 64

    private mutating func noteChunksLeftOnTheLink(_ before: Established) {
        for flight in before.inFlight.values {
            guard case .chunk(let chunk) = flight.message else { continue }
            let left = ChunksLeftOnTheLink(key: chunk.entry.key, version: chunk.entry.version,
                                           value: SyncMessage.ChunkedValue(totalSize: chunk.totalSize, totalChecksum: chunk.totalChecksum))
            guard !chunksLeftOnTheLink.contains(left) else { continue }
            chunksLeftOnTheLink.append(left)
            if chunksLeftOnTheLink.count > Self.maxChunksLeftOnTheLink { chunksLeftOnTheLink.removeFirst() }
        }
    }

    /// A batch or chunk arrived before the peer saw our hello: say hello again.
    mutating func receivedDataBeforeHandshake(now: Int64) -> [Action] {
        guard case .awaitingHello = state else { return [] }
        state = .awaitingHello(lastHelloAt: now)
        return [.send(hello(isReply: false))]
    }

    /// Registers an outgoing batch (tracked while established); returns the message to send.
    mutating func sendBatch(entries: [WireEntry], items: [BatchItem], range: SyncMessage.StreamRange? = nil, now: Int64) -> SyncMessage {
        withEstablished(ReplicationSession.sendsData)
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.batch(.init(id: id, entries: entries, range: range))
        let bytes = entries.reduce(0) { $0 + ($1.value?.count ?? 0) + $1.key.utf8.count }
        withEstablished { $0.inFlight[id] = InFlight(message: message, payload: .batch(items), sentAt: now, attempts: 1, bytes: bytes) }
        return message
    }

    /// Registers an outgoing chunk (tracked while established); returns the message to send.
    /// Registers an outgoing re-baseline notice (acknowledged like a batch,
    /// retransmitted like one); returns the message to send.
    mutating func sendRebaseline(purgedThrough: Int64, generation: Int64?, now: Int64) -> SyncMessage {
        withEstablished(ReplicationSession.sendsData)
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.rebaseline(.init(id: id, purgedThrough: purgedThrough, generation: generation))
        withEstablished { $0.inFlight[id] = InFlight(message: message, payload: .rebaseline, sentAt: now, attempts: 1) }
        return message
    }

    /// Registers this side's receipt (retransmitted like a batch until
    /// acknowledged); returns the message to send. Not data: it leaves a
    /// caught-up notice standing.
    mutating func sendReceipt(received: ReceivedStream, acknowledgedThrough: Int64, anchor: Int64, now: Int64) -> SyncMessage {
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.receipt(.init(id: id, receivedThrough: received.through, receivedAnchor: received.anchor,
                                                acknowledgedThrough: acknowledgedThrough, acknowledgedAnchor: anchor))
        withEstablished { $0.inFlight[id] = InFlight(message: message, payload: .receipt, sentAt: now, attempts: 1) }
        return message
    }

    /// Whether the established peer speaks protocol 3 (stream ranges, receipts).
    var peerSpeaksProtocol3: Bool { (established?.peer.protocolVersion ?? 0) >= SyncMessage.receiptProtocol }

    mutating func sendChunk(_ chunk: SyncMessage.Chunk, seq: Int64, now: Int64) -> SyncMessage {
        withEstablished(ReplicationSession.sendsData)
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.chunk(chunk)
        let key = chunkKey(chunk.entry.key, chunk.entry.version, chunk.index)
        withEstablished {
            $0.inFlight[id] = InFlight(message: message, payload: .chunk(key: chunk.entry.key, seq: seq, version: chunk.entry.version,
                                                                          index: chunk.index, isLast: chunk.index == chunk.count - 1),
                                       sentAt: now, attempts: 1, bytes: chunk.bytes.count)
            $0.chunkKeys[key, default: []].append(id)
        }
        return message
    }

    /// Data goes out: a caught-up notice sent before it no longer holds.
    private static func sendsData(_ established: inout Established) {
        established.announcedCaughtUp = false
        established.caughtUpNotice = nil
    }

    /// A caught-up notice, when the peer speaks protocol 2 and none went out
    /// since this side last sent data. Over a lossy transport (`retransmits`)
    /// an acknowledged notice is also renewed now and then (every
    /// `maxBackoffAttempts` retransmit intervals): a late duplicate from an
    /// earlier session of this side may have made the peer doubt it. Call it
    /// only when nothing is pending or in flight.
    mutating func announceCaughtUp(now: Int64) -> SyncMessage? {
        guard let established, established.peer.protocolVersion >= ReplicationSession.caughtUpProtocol else { return nil }
        let renew = retransmits && established.caughtUpNotice == nil
            && now - established.lastCaughtUpAt >= ReplicationSession.backoff(retransmitInterval, attempts: maxBackoffAttempts, cap: maxBackoffAttempts)
        guard !established.announcedCaughtUp || renew else { return nil }
        let id = nextBatchID
        nextBatchID += 1
        withEstablished {
            $0.announcedCaughtUp = true
            $0.lastCaughtUpAt = now
            $0.caughtUpNotice = CaughtUpNotice(id: id, sentAt: now, attempts: 1)
        }
        return .caughtUp(.init(id: id))
    }

    /// Whether the established peer speaks protocol 2 (caught-up notices, manual requests).
    var peerSpeaksProtocol2: Bool { (established?.peer.protocolVersion ?? 0) >= ReplicationSession.caughtUpProtocol }

    /// A fresh id for a message that is not tracked in the window (a manual request).
    mutating func takeMessageID() -> UInt64 {
        defer { nextBatchID += 1 }
        return nextBatchID
    }

    /// Something may be pending for the peer that a caught-up notice already
    /// denied (manual changes were released): send a new notice once caught up again.
    mutating func retractCaughtUp() {
        withEstablished(ReplicationSession.sendsData)
    }

    /// The peer sent data numbered `id` (a batch, a re-baseline notice, a
    /// manual reply that released changes): it may have more, unless the data
    /// is a late duplicate from before its last caught-up notice.
    mutating func peerSentData(id: UInt64) {
        withEstablished {
            if id > $0.peerCaughtUpID { $0.peerCaughtUp = false }
            $0.peerDataID = max($0.peerDataID, id)
        }
    }

    /// The peer says it has nothing more, unless data numbered after the notice already came.
    mutating func receiveCaughtUp(id: UInt64) {
        withEstablished {
            guard id > $0.peerDataID, id > $0.peerCaughtUpID else { return }
            $0.peerCaughtUp = true
            $0.peerCaughtUpID = id
        }
    }

    private func chunkKey(_ key: String, _ version: HLCTimestamp, _ index: Int) -> String { "\(key)\u{0}\(version)\u{0}\(index)" }

    /// Whether chunks of `key` at `version` are still unacknowledged. A resolver's
    /// merge gives one version two values, whose chunks the receiver stages one value
    /// at a time (and, before protocol 5, acknowledges by key, version and index only):
    /// the transfer of the other value waits until these are done.
    func hasChunksInFlight(key: String, version: HLCTimestamp) -> Bool {
        inFlight.values.contains { flight in
            if case .chunk(let k, _, let v, _, _) = flight.payload { k == key && v == version } else { false }
        }
    }

    /// Whether `id` is the caught-up notice this session awaits an acknowledgement of.
    func isCaughtUpNotice(_ id: UInt64) -> Bool {
        established?.caughtUpNotice?.id == id
    }

    /// A batch ack: the payload it acknowledges, once (duplicates return nil).
    mutating func acknowledgeBatch(_ id: UInt64) -> Payload? {
        withEstablished { established in
            if established.caughtUpNotice?.id == id {
                established.caughtUpNotice = nil
                return nil
            }
            guard let flight = established.inFlight.removeValue(forKey: id) else { return nil }
            ReplicationSession.retransmitSoon(&established, sentBefore: flight.sentAt)
            return flight.payload
        } ?? nil
    }

    /// A chunk ack: the payloads it acknowledges (that chunk as each transfer
    /// of its value sent it), once. An ack that names its value (protocol 5)
    /// acknowledges only chunks of that value: another value of the version
    /// (a resolver's merge) keeps its chunk of that index in flight.
    mutating func acknowledgeChunk(key: String, version: HLCTimestamp, index: Int, value: SyncMessage.ChunkedValue? = nil) -> [Payload] {
        let chunk = chunkKey(key, version, index)
        return withEstablished { established in
            var ids = established.chunkKeys.removeValue(forKey: chunk) ?? []
            if let value {
                let others = ids.filter { id in
                    guard case .chunk(let sent)? = established.inFlight[id]?.message else { return false }
                    return sent.totalSize != value.totalSize || sent.totalChecksum != value.totalChecksum
                }
                if !others.isEmpty {
                    established.chunkKeys[chunk] = others
                    ids.removeAll { others.contains($0) }
                }
            }
            let flights = ids.compactMap { established.inFlight.removeValue(forKey: $0) }
            if let latest = flights.map(\.sentAt).max() { ReplicationSession.retransmitSoon(&established, sentBefore: latest) }
            return flights.map(\.payload)
        } ?? []
    }

    /// A message from the established peer: the link carries frames again.
    /// The backoff of what is still unacknowledged starts over, so it goes
    /// again one `retransmitInterval` after its last send rather than up to
    /// `maxBackoffAttempts` intervals: the backoff spares a silent link, and
    /// under heavy loss a peer that talks gets more tries (a resend stays at
    /// most one per interval).
    mutating func peerIsReachable() {
        guard retransmits else { return }
        withEstablished { established in
            for (id, flight) in established.inFlight where flight.attempts > 1 { established.inFlight[id]!.attempts = 1 }
            if let notice = established.caughtUpNotice, notice.attempts > 1 { established.caughtUpNotice!.attempts = 1 }
        }
    }

    /// Messages still unacknowledged though sent before one the peer just
    /// acknowledged: due at the next tick, with their backoff reset.
    private static func retransmitSoon(_ established: inout Established, sentBefore sentAt: Int64) {
        for (id, flight) in established.inFlight where flight.sentAt < sentAt {
            established.inFlight[id]!.attempts = 1
            established.inFlight[id]!.dueNow = true
        }
    }

    /// Resends what timed out: the hello while waiting (over a lossy
    /// transport; or gives up after `helloTimeout`), in-flight messages after `retransmitInterval`.
    mutating func tick(now: Int64) -> [Action] {
        clockWentBack(to: now)
        switch state {
        case .awaitingHello where helloTimeout.map { now - startedAt >= $0 } ?? false:
            let error = SyncError(.timeout, "the peer did not answer the hello within \(helloTimeout ?? 0) ms: no session runs at its end of the connection")
            state = .failed(error, peer: nil)
            return [.fail(error, notifyPeer: false)]
        // Not over a transport that delivers every frame: the hello arrives, and a second one would
        // make the peer start the session over (a peer slow to answer is not a lost hello).
        case .awaitingHello(let lastHelloAt) where retransmits && now - lastHelloAt >= helloRetryInterval:
            state = .awaitingHello(lastHelloAt: now)
            return [.send(hello(isReply: false))]
        case .established where retransmits:
            let (interval, cap) = (retransmitInterval, maxBackoffAttempts)
            return withEstablished { established in
                var actions: [Action] = []
                for id in established.inFlight.keys.sorted() {
                    let flight = established.inFlight[id]!
                    let backoff = ReplicationSession.backoff(interval, attempts: flight.attempts, cap: cap)
                    guard flight.dueNow || now - flight.sentAt >= backoff else { continue }
                    established.inFlight[id]!.sentAt = now
                    established.inFlight[id]!.attempts += 1
                    established.inFlight[id]!.dueNow = false
                    actions.append(.send(flight.message))
                }
                if let notice = established.caughtUpNotice, now - notice.sentAt >= ReplicationSession.backoff(interval, attempts: notice.attempts, cap: cap) {
                    established.caughtUpNotice!.sentAt = now
                    established.caughtUpNotice!.attempts += 1
                    actions.append(.send(.caughtUp(.init(id: notice.id))))
                }
                return actions
            } ?? []
        default:
            return []
        }
    }

    /// The wait before a resend: `interval` times `attempts` (at most `cap`),
    /// saturating: `retransmitMilliseconds = .max` ("never resend") waits
    /// for ever instead of trapping on the product.
    static func backoff(_ interval: Int64, attempts: Int, cap: Int) -> Int64 {
        let (product, overflow) = interval.multipliedReportingOverflow(by: Int64(min(attempts, cap)))
        return overflow ? (interval < 0 ? .min : .max) : product
    }

    /// The timers' instants, once the wall clock `now` reads earlier than one
    /// of them (the device's clock was set back): each such instant becomes
    /// `now`, so the wait it times starts over instead of lasting until the
    /// clock has caught up again (a day set back kept the hello unanswered, or
    /// a lost batch unsent, for a day). A jump back costs at most one more wait.
    private mutating func clockWentBack(to now: Int64) {
        if startedAt > now { startedAt = now }
        switch state {
        case .awaitingHello(let lastHelloAt) where lastHelloAt > now:
            state = .awaitingHello(lastHelloAt: now)
        case .established(var established):
            var moved = false
            for (id, flight) in established.inFlight where flight.sentAt > now {
                established.inFlight[id]!.sentAt = now
                moved = true
            }
            if let notice = established.caughtUpNotice, notice.sentAt > now {
                established.caughtUpNotice!.sentAt = now
                moved = true
            }
            if established.lastCaughtUpAt > now {
                established.lastCaughtUpAt = now
                moved = true
            }
            if moved { state = .established(established) }
        default:
            break
        }
    }

    /// Ends the session with `error` (the first error stays).
    mutating func fail(_ error: SyncError) {
        if case .failed = state { return }
        state = .failed(error, peer: knownPeer)
    }

    /// Ends the session without an error: the connection went away.
    mutating func close() {
        guard !isOver else { return }
        state = .closed(peer: knownPeer)
    }
}

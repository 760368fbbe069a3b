import SyncTransport

/// The replication session's protocol state, as a pure state machine: no
/// I/O, no clock reads. Inputs are messages and times; outputs are actions
/// that the shell (`ReplicationEndpoint`) performs.
///
/// Handshake: each side sends a hello; a hello that is not a reply is
/// answered with one, so either side may (re)start. A side is established
/// once it has validated the peer's hello. Then batches and chunks go out in
/// a window of unacknowledged messages, each retransmitted after a timeout
/// that grows with its attempts up to `maxBackoffAttempts` intervals
/// (delivery is at-least-once; apply is idempotent). An acknowledgement
/// proves the link works and that messages sent before the acknowledged one
/// were probably lost: those go out again at the next tick, their backoff
/// reset (a fast retransmit).
struct SessionStateMachine {
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
    }

    /// What one in-flight message carried, for acknowledgement bookkeeping.
    enum Payload: Sendable, Equatable {
        case batch([BatchItem])
        case chunk(key: String, seq: Int64, version: HLCTimestamp, index: Int, isLast: Bool)
        case rebaseline
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
        /// Set by a fast retransmit: resend at the next tick.
        var dueNow = false
    }

    enum Phase: Sendable, Equatable { case idle, waitingForPeer, established, failed }

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
    /// The longest wait between retransmissions, in `retransmitInterval`s.
    var maxBackoffAttempts = 4
    /// False over a transport that delivers every frame while connected:
    /// unacknowledged messages then wait for their acknowledgement or for the
    /// connection to fail, and are never sent twice in one session.
    var retransmits = true

    private(set) var phase: Phase = .idle
    private(set) var peer: Peer?
    private var lastHelloAt: Int64 = 0
    private(set) var inFlight: [UInt64: InFlight] = [:]
    private var nextBatchID: UInt64 = 1
    private var chunkKeys: [String: UInt64] = [:]
    var partialTransfers: [PartialTransfer] = []

    init(identity: Identity, helloRetryInterval: Int64 = 1_000, retransmitInterval: Int64 = 2_000, window: Int = 4) {
        self.identity = identity
        self.helloRetryInterval = helloRetryInterval
        self.retransmitInterval = retransmitInterval
        self.window = window
    }

    var isEstablished: Bool { phase == .established }
    /// Nothing more goes out while a re-baseline notice waits for its
    /// acknowledgement: the watch must act on it before the baseline arrives.
    var hasCapacity: Bool { phase == .established && inFlight.count < window && !awaitsRebaseline }
    private var awaitsRebaseline: Bool { inFlight.values.contains { $0.payload == .rebaseline } }
    var isQuiet: Bool { inFlight.isEmpty }

    func hello(isReply: Bool) -> SyncMessage {
        .hello(.init(protocolRange: identity.protocolRange, node: identity.node, role: identity.role, isReply: isReply,
                     pairingEpoch: identity.pairingEpoch, registryFingerprint: identity.fingerprint,
                     declarations: identity.declarations, partialTransfers: partialTransfers))
    }

    mutating func start(now: Int64) -> [Action] {
        phase = .waitingForPeer
        lastHelloAt = now
        return [.send(hello(isReply: false))]
    }

    /// Handles one message from the peer. Batches and chunks are not handled
    /// here (the shell applies them); acks return the acknowledged payload.
    mutating func receiveHello(_ hello: SyncMessage.Hello, now: Int64) -> [Action] {
        guard phase != .failed else { return [] }
        switch SessionStateMachine.validate(local: identity, peer: hello) {
        case .failure(let error):
            phase = .failed
            return [.fail(error, notifyPeer: true)]
        case .success(let validated):
            var actions: [Action] = []
            if !hello.isReply { actions.append(.send(self.hello(isReply: true))) }
            let restarted = peer != nil && phase == .established && !hello.isReply
            if phase != .established || restarted {
                // A fresh hello mid-session means the peer restarted: what was in flight is gone.
                inFlight.removeAll()
                chunkKeys.removeAll()
                phase = .established
                peer = validated
                actions.append(.established(validated))
            }
            return actions
        }
    }

    /// A batch or chunk arrived before the peer saw our hello: say hello again.
    mutating func receivedDataBeforeHandshake(now: Int64) -> [Action] {
        guard phase == .waitingForPeer else { return [] }
        lastHelloAt = now
        return [.send(hello(isReply: false))]
    }

    /// Registers an outgoing batch; returns the message to send.
    mutating func sendBatch(entries: [WireEntry], items: [BatchItem], now: Int64) -> SyncMessage {
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.batch(.init(id: id, entries: entries))
        inFlight[id] = InFlight(message: message, payload: .batch(items), sentAt: now, attempts: 1)
        return message
    }

    /// Registers an outgoing re-baseline notice (acknowledged like a batch,
    /// retransmitted like one); returns the message to send.
    mutating func sendRebaseline(purgedThrough: Int64, now: Int64) -> SyncMessage {
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.rebaseline(.init(id: id, purgedThrough: purgedThrough))
        inFlight[id] = InFlight(message: message, payload: .rebaseline, sentAt: now, attempts: 1)
        return message
    }

    /// Registers an outgoing chunk; returns the message to send.
    mutating func sendChunk(_ chunk: SyncMessage.Chunk, seq: Int64, now: Int64) -> SyncMessage {
        let id = nextBatchID
        nextBatchID += 1
        let message = SyncMessage.chunk(chunk)
        inFlight[id] = InFlight(message: message, payload: .chunk(key: chunk.entry.key, seq: seq, version: chunk.entry.version,
                                                                   index: chunk.index, isLast: chunk.index == chunk.count - 1),
                                sentAt: now, attempts: 1)
        chunkKeys[chunkKey(chunk.entry.key, chunk.entry.version, chunk.index)] = id
        return message
    }

    private func chunkKey(_ key: String, _ version: HLCTimestamp, _ index: Int) -> String { "\(key)\u{0}\(version)\u{0}\(index)" }

    /// A batch ack: the payload it acknowledges, once (duplicates return nil).
    mutating func acknowledgeBatch(_ id: UInt64) -> Payload? {
        guard let flight = inFlight.removeValue(forKey: id) else { return nil }
        retransmitSoon(sentBefore: flight.sentAt)
        return flight.payload
    }

    /// A chunk ack: the payload it acknowledges, once.
    mutating func acknowledgeChunk(key: String, version: HLCTimestamp, index: Int) -> Payload? {
        guard let id = chunkKeys.removeValue(forKey: chunkKey(key, version, index)),
              let flight = inFlight.removeValue(forKey: id) else { return nil }
        retransmitSoon(sentBefore: flight.sentAt)
        return flight.payload
    }

    /// Messages still unacknowledged though sent before one the peer just
    /// acknowledged: due at the next tick, with their backoff reset.
    private mutating func retransmitSoon(sentBefore sentAt: Int64) {
        for (id, flight) in inFlight where flight.sentAt < sentAt {
            inFlight[id]!.attempts = 1
            inFlight[id]!.dueNow = true
        }
    }

    /// Resends what timed out: the hello while waiting, in-flight messages after `retransmitInterval`.
    mutating func tick(now: Int64) -> [Action] {
        switch phase {
        case .waitingForPeer where now - lastHelloAt >= helloRetryInterval:
            lastHelloAt = now
            return [.send(hello(isReply: false))]
        case .established where retransmits:
            var actions: [Action] = []
            for id in inFlight.keys.sorted() {
                let flight = inFlight[id]!
                let backoff = retransmitInterval * Int64(min(flight.attempts, maxBackoffAttempts))
                guard flight.dueNow || now - flight.sentAt >= backoff else { continue }
                inFlight[id]!.sentAt = now
                inFlight[id]!.attempts += 1
                inFlight[id]!.dueNow = false
                actions.append(.send(flight.message))
            }
            return actions
        default:
            return []
        }
    }

    mutating func fail() { phase = .failed }

    /// Checks a peer's hello against ours: common protocol version, a phone
    /// with a watch, distinct nodes, one pairing epoch; collects key mismatches.
    static func validate(local: Identity, peer hello: SyncMessage.Hello) -> Result<Peer, SyncError> {
        let low = max(local.protocolRange.lowerBound, hello.protocolRange.lowerBound)
        let high = min(local.protocolRange.upperBound, hello.protocolRange.upperBound)
        guard low <= high else {
            return .failure(SyncError(.handshakeFailed, "no common protocol version: ours \(local.protocolRange.lowerBound)...\(local.protocolRange.upperBound), peer \(hello.protocolRange.lowerBound)...\(hello.protocolRange.upperBound); update the older app"))
        }
        guard hello.role != local.role else {
            return .failure(SyncError(.handshakeFailed, "a \(local.role) pairs only with a \(local.role.counterpart), but the peer is also a \(hello.role)"))
        }
        guard hello.node != local.node else {
            return .failure(SyncError(.handshakeFailed, "the peer has this store's own node id \(String(local.node, radix: 16)); a store cannot sync with a copy of itself"))
        }
        guard hello.pairingEpoch == local.pairingEpoch else {
            return .failure(SyncError(.pairingMismatch, "the peer belongs to another pairing (epoch \(PeerText.escaped(hello.pairingEpoch, maxLength: 64)), ours \(local.pairingEpoch)); pair the devices again"))
        }
        var mismatched = Set<String>()
        if hello.registryFingerprint != local.fingerprint {
            let ours = Dictionary(local.declarations.map { (name(of: $0), $0) }, uniquingKeysWith: { a, _ in a })
            let theirs = Dictionary(hello.declarations.map { (name(of: $0), $0) }, uniquingKeysWith: { a, _ in a })
            for key in Set(ours.keys).union(theirs.keys) where ours[key] != theirs[key] { mismatched.insert(key) }
        }
        return .success(Peer(node: hello.node, role: hello.role, protocolVersion: high, mismatchedKeys: mismatched,
                             partialTransfers: hello.partialTransfers))
    }

    private static func name(of declaration: String) -> String {
        String(declaration.prefix { $0 != "|" })
    }
}

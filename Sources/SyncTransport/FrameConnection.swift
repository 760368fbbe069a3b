/// Counters of one connection, as bytes on the wire and frames.
public struct ConnectionStatistics: Sendable, Equatable {
    public var framesSent: Int = 0
    public var framesReceived: Int = 0
    /// Bytes handed to the wire, envelope included (after compression and encryption).
    public var bytesSent: Int = 0
    /// Bytes read from the wire, envelope included.
    public var bytesReceived: Int = 0
    /// Payload bytes before compression, for the frames sent.
    public var payloadBytesSent: Int = 0
    /// Writes handed to the socket: frames queued together share one (TCP only).
    public var socketWrites: Int = 0

    public init() {}
}

/// One bidirectional, ordered pipe of frames between two peers.
///
/// Implementations: the in-memory pair (`InMemoryConnection.makePair()`) and
/// TCP (`TCPTransport`). The engine runs the same replication code over both.
public protocol FrameConnection: Sendable {
    /// Frames from the peer, in the order they arrived. Finishes when the
    /// connection closes normally; throws a `TransportError` when it fails.
    var inbound: AsyncThrowingStream<Frame, any Error> { get }

    /// Sends one frame. Suspends while the outbound buffer is full
    /// (backpressure); throws a `TransportError` once the connection is closed.
    /// Over TCP, a frame beyond `TCPConfiguration.limits` (even once deflated)
    /// throws `.oversizedFrame`: nothing is sent, the connection stays open.
    /// Over any connection (TCP and `InMemoryConnection`), a type outside
    /// `0x01...0xEF` throws `.protocolViolation` the same way.
    func send(_ frame: Frame) async throws

    /// Closes the connection; `inbound` finishes. Safe to call more than once.
    /// Over TCP, what was sent is written first, and the frames the peer
    /// sent meanwhile still reach `inbound` until the peer closes its side
    /// (at most a second; from a cancelled task, `close()` returns at once).
    func close() async

    /// A short, human-readable description of the remote end (never a secret).
    var peerDescription: String { get }

    /// Bytes and frames moved so far.
    var statistics: ConnectionStatistics { get }

    /// True when every frame sent while the connection is open arrives, in
    /// order (TCP, the in-memory pair): a replication session then never
    /// retransmits within the connection (a slow acknowledgement is not a lost
    /// frame); a connection that fails starts a new session instead.
    var deliversEveryFrame: Bool { get }

    /// The epoch (`PairingSecret.epoch`) of the pairing this connection
    /// authenticated with, when the transport authenticates: a listener that
    /// holds several pairings (a phone with several watches) tells each
    /// connection's. `nil` when the transport does not know (in-memory pairs);
    /// the engine then uses its configured epoch.
    var pairingEpoch: String? { get }
}

extension FrameConnection {
    /// By default a connection may lose frames, and sessions over it retransmit.
    public var deliversEveryFrame: Bool { false }

    /// By default a connection does not know its pairing.
    public var pairingEpoch: String? { nil }
}

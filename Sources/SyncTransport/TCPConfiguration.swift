import Logging

/// Which way bytes crossed the socket, for `TCPConfiguration.onWireBytes`.
public enum WireDirection: String, Sendable, Hashable {
    case inbound
    case outbound
}

/// Settings of a TCP connection or listener.
public struct TCPConfiguration: Sendable {
    /// The wire envelope versions this build speaks.
    public static let supportedWireVersions: ClosedRange<UInt8> = FrameEnvelope.supportedVersions

    /// The shared pairing secret both ends must prove. A dialer proves it;
    /// a listener accepts it and each of `additionalSecrets`.
    public var secret: PairingSecret
    /// More pairings a listener accepts besides `secret`: a phone holds one
    /// secret per watch. A dialer names its pairing in its hello
    /// (`PairingSecret.id`) and the listener answers with that secret; a
    /// dialer built before pairing ids is answered with `secret`. A dialer
    /// ignores this list.
    public var additionalSecrets: [PairingSecret] = []
    /// The dialer names its pairing in its hello (`0xF5`, the default). Set
    /// it to `false` only to dial a listener built before pairing ids (it
    /// refuses that hello with `protocol-violation`): the older hello
    /// (`0xF0`) is then answered with the listener's primary `secret`.
    public var namesPairingInHello = true
    /// Frame size limits (checked before buffering a payload).
    public var limits: FrameLimits
    /// How often an idle connection sends an encrypted heartbeat. Zero or
    /// less sends none (a peer's `deadPeerTimeout` then closes a connection
    /// idle for that long). A positive interval below
    /// `minimumHeartbeatInterval` (10 ms) is taken as it, so that a tiny one
    /// (1 ns) does not send heartbeats back to back.
    public var heartbeatInterval: Duration {
        didSet { heartbeatInterval = Self.boundedHeartbeat(heartbeatInterval) }
    }
    /// The shortest positive `heartbeatInterval`: 10 ms.
    public static let minimumHeartbeatInterval: Duration = .milliseconds(10)

    private static func boundedHeartbeat(_ interval: Duration) -> Duration {
        interval > .zero ? max(interval, minimumHeartbeatInterval) : interval
    }
    /// A connection that hears nothing (not even a heartbeat) for this long
    /// while its reader waits closes with `.timeout`. Time the reader spends
    /// waiting for a slow consumer of `inbound` does not count. Zero or less:
    /// never (a dead peer is then noticed only when a write fails).
    public var deadPeerTimeout: Duration
    /// The handshake must finish within this time, or the connection closes with `.timeout`.
    public var handshakeTimeout: Duration
    /// How long a closing connection, its own frames written, waits for the
    /// peer to close its side while it still reads what the peer sends (at
    /// most `handshakeTimeout`; 1 s by default). Then the socket closes:
    /// frames of the peer not read by then are dropped, and a peer that had
    /// stopped reading sees a reset.
    public var closeLinger: Duration = .seconds(1)
    /// Bytes of frames `send` may queue before it suspends; also the socket
    /// write buffer's high-water mark. Bounds the sender's memory when the
    /// peer reads slowly.
    public var maxPendingOutboundBytes: Int
    /// Bytes of received frames held for a slow consumer of `inbound` before
    /// the connection stops reading from the socket.
    public var maxBufferedInboundBytes: Int
    /// The envelope versions to announce in the handshake. Defaults to
    /// `FrameEnvelope.supportedVersions`; change it only to test negotiation.
    public var wireVersions: ClosedRange<UInt8>
    /// Where the transport logs connections, rejections and failures (never
    /// payloads or the secret). Defaults to discarding.
    public var logger: Logger
    /// Sees every byte read from or written to the socket, for tests and
    /// diagnostics. Called on an event loop: keep it short.
    public var onWireBytes: (@Sendable (WireDirection, [UInt8]) -> Void)?
    /// Told how many bytes each socket read or write moved, without a copy of
    /// them: for counters and benchmarks. Called on an event loop: keep it short.
    public var onWireByteCount: (@Sendable (WireDirection, Int) -> Void)?
    /// How many handshake rejections a listener logs and reports (on
    /// `rejections`, `rejectionReports`) at most: by default 10 at once, then
    /// one a second. Beyond it they are counted, and the count goes with the
    /// next report (`TCPListener.Rejection.suppressed`): a flood of strangers
    /// costs a bounded number of log lines and events.
    public var rejectionReportLimit = RateLimit()
    /// How many authenticated connections a listener keeps waiting for its
    /// consumer to take them from `connections`. One more is closed at once
    /// and reported as a rejection (`too-many-connections`): a consumer that
    /// stopped taking, or a paired peer that dials faster than it takes,
    /// costs a bounded number of open sockets.
    public var maxUntakenConnections = 64
    /// How many connections a listener lets run their handshake at once. One
    /// more is closed at once and reported as a rejection
    /// (`too-many-connections`): strangers that connect and never finish the
    /// handshake hold a bounded number of sockets (each for at most
    /// `handshakeTimeout`), never every descriptor of the process.
    public var maxPendingHandshakes = 64

    /// Every pairing a listener accepts: `secret`, then `additionalSecrets`
    /// (the same secret given twice counts once).
    public var secrets: [PairingSecret] {
        var all = [secret]
        // By id (one per secret, derived when it was made): a phone may hold hundreds.
        var seen: Set<[UInt8]> = [secret.id]
        for extra in additionalSecrets where seen.insert(extra.id).inserted { all.append(extra) }
        return all
    }

    /// A listener's configuration for several pairings (a phone with several
    /// watches, one secret each): the first is the primary `secret`, the
    /// rest `additionalSecrets`. Every other setting has its default.
    /// Throws `.badSecretFile` when `secrets` is empty.
    public init(secrets: [PairingSecret]) throws {
        guard let primary = secrets.first else {
            throw TransportError(.badSecretFile, "a listener needs at least one pairing secret; pair the devices first (syncsim pair)")
        }
        self.init(secret: primary)
        additionalSecrets = Array(secrets.dropFirst())
    }

    /// Creates a configuration; every setting but the secret has a default.
    public init(
        secret: PairingSecret,
        limits: FrameLimits = .default,
        heartbeatInterval: Duration = .seconds(5),
        deadPeerTimeout: Duration = .seconds(20),
        handshakeTimeout: Duration = .seconds(10),
        maxPendingOutboundBytes: Int = 1 << 20,
        maxBufferedInboundBytes: Int = 1 << 20,
        wireVersions: ClosedRange<UInt8> = TCPConfiguration.supportedWireVersions,
        logger: Logger = Logger(label: "SyncTransport", factory: { _ in SwiftLogNoOpLogHandler() }),
        onWireBytes: (@Sendable (WireDirection, [UInt8]) -> Void)? = nil
    ) {
        self.secret = secret
        self.limits = limits
        self.heartbeatInterval = Self.boundedHeartbeat(heartbeatInterval)
        self.deadPeerTimeout = deadPeerTimeout
        self.handshakeTimeout = handshakeTimeout
        self.maxPendingOutboundBytes = maxPendingOutboundBytes
        self.maxBufferedInboundBytes = maxBufferedInboundBytes
        self.wireVersions = wireVersions
        self.logger = logger
        self.onWireBytes = onWireBytes
    }
}

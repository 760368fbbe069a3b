import NIOCore
import Synchronization

/// Splits the TCP byte stream into envelopes (`ByteToMessageDecoder`).
///
/// Checks magic, version, flags and length as soon as the header bytes are
/// there, so an oversized or foreign frame fails before its payload is
/// buffered; then the checksum. Decryption and inflation happen in the
/// connection's async code. The first `handshakeFrames` frames may be at most
/// `handshakeFrameLimit` bytes and must not be compressed (refused as soon as
/// the flags byte arrives); nothing after them is decoded until the handshake
/// succeeded (`SocketActivity.didAuthenticate()`), and reads are held
/// meanwhile (`AuthenticationGate`): a stranger cannot make us buffer or
/// inflate megabytes before it authenticated. With `handshakeFrames` 0 the
/// connection has no handshake: every frame is decoded.
struct EnvelopeDecoderHandler: ByteToMessageDecoder {
    typealias InboundOut = Envelope

    static let handshakeFrameLimit = 4096
    /// The limits of the handshake's frames, whatever `TCPConfiguration.limits`
    /// say: those are fixed and small (65 bytes at most, an error report about
    /// a kilobyte), and an app's smaller limits must not refuse them.
    static let handshakeLimits = FrameLimits(
        maxFrameSize: handshakeFrameLimit, maxInflatedSize: handshakeFrameLimit, compressionThreshold: Int.max)

    let codec: FrameCodec
    let handshakeCodec: FrameCodec
    var handshakeFrames: Int
    /// Whether this connection runs a handshake (whose success lifts the small limit).
    let authenticates: Bool
    /// The connection ended: what it holds is decoded (it is bounded by the held reads).
    var closing = false
    let activity: SocketActivity

    init(limits: FrameLimits, handshakeFrames: Int, activity: SocketActivity) {
        self.activity = activity
        codec = FrameCodec(limits: limits)
        handshakeCodec = FrameCodec(limits: Self.handshakeLimits)
        self.handshakeFrames = handshakeFrames
        authenticates = handshakeFrames > 0
    }

    /// Whether the handshake's frames are in and it has not succeeded yet:
    /// nothing more is decoded (or read) until it has.
    private func awaitsAuthentication() -> Bool {
        authenticates && handshakeFrames == 0 && !closing && !activity.isAuthenticated
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if awaitsAuthentication() {
            activity.holdReadsUntilAuthenticated()
            return .needMoreData
        }
        let active = handshakeFrames > 0 ? handshakeCodec : codec
        let parsed = try active.parseHeader(buffer.readableBytesView.prefix(FrameEnvelope.headerSize))
        if handshakeFrames > 0, let flags = buffer.getInteger(at: buffer.readerIndex + 4, as: UInt8.self),
           EnvelopeFlags(rawValue: flags).contains(.compressed) {
            let type = buffer.getInteger(at: buffer.readerIndex + 3, as: UInt8.self) ?? 0
            throw TransportError(
                .protocolViolation,
                "a compressed frame of type 0x\(hex(type)) arrived before authentication; handshake frames are never compressed")
        }
        guard let header = parsed else {
            return .needMoreData
        }
        guard buffer.readableBytes >= FrameEnvelope.headerSize + header.payloadLength else {
            return .needMoreData
        }
        buffer.moveReaderIndex(forwardBy: FrameEnvelope.headerSize)
        let payload = buffer.readBytes(length: header.payloadLength) ?? []
        let envelope = try active.envelope(header, payload: payload)
        if handshakeFrames > 0 { handshakeFrames -= 1 }
        activity.didDecode()
        context.fireChannelRead(wrapInboundOut(envelope))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A peer may send its first frames and close before its proof was checked: they are
        // decoded for the handshake to deliver (or drop, if it fails); reads were held, so they are few.
        closing = true
        while try decode(context: context, buffer: &buffer) == .continue {}
        if buffer.readableBytes > 0 {
            let count = buffer.readableBytes
            buffer.moveReaderIndex(forwardBy: count)
            throw TransportError(
                .truncatedFrame, "the connection ended inside a frame; only \(count) bytes of it arrived")
        }
        return .needMoreData
    }
}

/// Shows raw socket bytes to `TCPConfiguration.onWireBytes`, and their count
/// to `TCPConfiguration.onWireByteCount`.
final class WireTapHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let tap: (@Sendable (WireDirection, [UInt8]) -> Void)?
    private let count: (@Sendable (WireDirection, Int) -> Void)?

    init(tap: (@Sendable (WireDirection, [UInt8]) -> Void)?, count: (@Sendable (WireDirection, Int) -> Void)?) {
        self.tap = tap
        self.count = count
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        count?(.inbound, buffer.readableBytes)
        tap?(.inbound, Array(buffer.readableBytesView))
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let buffer = unwrapOutboundIn(data)
        count?(.outbound, buffer.readableBytes)
        tap?(.outbound, Array(buffer.readableBytesView))
        context.write(data, promise: promise)
    }
}

/// What the event loop saw arrive on one socket, for the dead-peer watchdog:
/// when bytes last came in, and how many decoded envelopes wait for the
/// connection's reader task. Measured on the event loop, so a busy or
/// starved task pool never makes a live peer look dead.
final class SocketActivity: Sendable {
    private struct State {
        var lastRead = ContinuousClock.now
        var undelivered = 0
        var authenticated = false
        var holdsReads = false
    }

    private let state = Mutex(State())
    private let unwritable: AsyncStream<Void>.Continuation
    /// Each time the socket stops taking writes (NIO's pending writes passed
    /// the high water mark), for tests; only the newest is kept.
    let writabilityLosses: AsyncStream<Void>

    init() {
        (writabilityLosses, unwritable) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func didRead() { state.withLock { $0.lastRead = .now } }
    func didLoseWritability() { unwritable.yield() }
    func didDecode() { state.withLock { $0.undelivered += 1 } }
    /// The handshake succeeded: frames of any size (within the limits) may come, reads go on.
    func didAuthenticate() {
        state.withLock {
            $0.authenticated = true
            $0.holdsReads = false
        }
    }
    var isAuthenticated: Bool { state.withLock { $0.authenticated } }
    /// The decoder has the handshake's frames: no more reads until the handshake succeeded.
    func holdReadsUntilAuthenticated() { state.withLock { $0.holdsReads = !$0.authenticated } }
    /// Whether reads wait for the handshake to succeed (`AuthenticationGate`).
    var holdsReads: Bool { state.withLock { $0.holdsReads } }
    func didDeliver() { state.withLock { $0.undelivered -= 1 } }

    /// When bytes last arrived, and whether decoded envelopes wait for the reader.
    var snapshot: (lastRead: ContinuousClock.Instant, envelopesWaiting: Bool) {
        state.withLock { ($0.lastRead, $0.undelivered > 0) }
    }
}

/// Records reads and losses of writability into a `SocketActivity`; passes everything on.
final class SocketActivityHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let activity: SocketActivity

    init(activity: SocketActivity) {
        self.activity = activity
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        activity.didRead()
        context.fireChannelRead(data)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if !context.channel.isWritable { activity.didLoseWritability() }
        context.fireChannelWritabilityChanged()
    }
}

/// A configured socket: the async channel and its activity record.
struct TransportChannel: Sendable {
    var asyncChannel: NIOAsyncChannel<Envelope, ByteBuffer>
    var activity: SocketActivity
    /// The peer's address, taken when an accepted socket is set up: once the
    /// socket has closed (a stranger refused before its turn), NIO no longer knows it.
    var peer: String?
}

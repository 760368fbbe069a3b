import Logging
import NIOCore
import Synchronization

/// An authenticated, encrypted `FrameConnection` over one TCP socket.
///
/// Made by `TCPTransport.connect` and `TCPListener` once the handshake
/// succeeded. Three loops run for it, in the task that owns the socket:
/// the reader (decrypts, answers heartbeats and control frames, hands
/// application frames to `inbound` through a bounded buffer), the writer
/// (seals and writes queued frames, suspending while the socket is not
/// writable), and the timers (heartbeats, dead-peer watchdog).
final class TCPConnection: FrameConnection {
    private struct State {
        var statistics = ConnectionStatistics()
        /// Why the connection ended; `nil` for a normal close.
        var closeReason: TransportError?
        var closing = false
        var lastHeard = ContinuousClock.now
        var lastSent = ContinuousClock.now
        var readerWaitsForConsumer = false
        /// The reader reached the end of the stream (or failed) and ended the connection.
        var readerEnded = false
    }

    let peerDescription: String
    /// TCP: while the connection is open, every frame arrives, in order.
    var deliversEveryFrame: Bool { true }
    let inbound: AsyncThrowingStream<Frame, any Error>
    /// The envelope version negotiated in the handshake.
    let version: UInt8
    /// The epoch of the pairing this connection authenticated with.
    let pairingEpoch: String?
    /// Each time `send` suspends because the outbound buffer is full (for tests).
    let sendSuspensions: AsyncStream<Void>
    /// Each time the reader suspends because the inbound buffer is full (for tests).
    let readerSuspensions: AsyncStream<Void>

    private let channel: any Channel
    private let activity: SocketActivity
    private let configuration: TCPConfiguration
    private let inboundQueue: AsyncBoundedQueue<Frame>
    private let outboundQueue: AsyncBoundedQueue<Frame>
    private let state = Mutex(State())
    private let closed = Latch()
    private let logger: Logger

    init(
        channel: any Channel, activity: SocketActivity, version: UInt8, pairingEpoch: String, peer: String,
        configuration: TCPConfiguration
    ) {
        self.channel = channel
        self.activity = activity
        self.version = version
        self.pairingEpoch = pairingEpoch
        self.peerDescription = peer
        self.configuration = configuration
        var logger = configuration.logger
        logger[metadataKey: "peer"] = "\(peer)"
        self.logger = logger
        let (readerSuspensions, readerSuspended) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.readerSuspensions = readerSuspensions
        let inboundQueue = AsyncBoundedQueue<Frame>(
            capacity: configuration.maxBufferedInboundBytes, onSuspend: { readerSuspended.yield() })
        self.inboundQueue = inboundQueue
        let (suspensions, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.sendSuspensions = suspensions
        self.outboundQueue = AsyncBoundedQueue<Frame>(
            capacity: configuration.maxPendingOutboundBytes, onSuspend: { continuation.yield() })
        self.inbound = AsyncThrowingStream(unfolding: { try await inboundQueue.pop() })
    }

    var statistics: ConnectionStatistics { state.withLock { $0.statistics } }

    /// Each time the socket stops taking writes (for tests); see `socketRefusesWrites()`.
    var writabilityLosses: AsyncStream<Void> { activity.writabilityLosses }

    /// Whether the socket refuses writes once the event loop has run what
    /// was handed to it: its writes wait for room (for tests).
    func socketRefusesWrites() async -> Bool {
        let channel = self.channel
        return (try? await channel.eventLoop.submit { !channel.isWritable }.get()) ?? false
    }

    /// Bytes queued by `send` and not yet handed to the socket.
    var pendingOutboundBytes: Int { outboundQueue.usedCost }

    func send(_ frame: Frame) async throws {
        try Frame.checkApplicationType(frame.type)
        if let failure = state.withLock({ $0.closing ? ($0.closeReason ?? TransportError(.closed, "the connection is closed")) : nil }) {
            throw TransportError(.closed, "the connection is closed (\(failure.code))")
        }
        try checkSendable(frame)
        try await outboundQueue.push(frame, cost: frame.payload.count + FrameEnvelope.headerSize)
    }

    /// Throws `.oversizedFrame` for a frame the writer could never seal within
    /// `TCPConfiguration.limits`: past `maxInflatedSize`, or past `maxFrameSize`
    /// once deflated and sealed. Queued, it would close the whole connection
    /// after `send` returned. Only a payload that does not fit as it is gets
    /// deflated here (and again by the writer).
    private func checkSendable(_ frame: Frame) throws {
        let limits = configuration.limits
        guard frame.payload.count > limits.maxInflatedSize || frame.payload.count + FrameSealer.tagSize > limits.wireLimit else {
            return
        }
        do {
            let codec = FrameCodec(limits: limits)
            let envelope = try codec.makeEnvelope(frame, version: version)
            try codec.checkWireSize(envelope.payload.count + FrameSealer.tagSize)
        } catch let error as TransportError where error.code == .oversizedFrame {
            throw TransportError(
                .oversizedFrame,
                "cannot send a frame of type 0x\(hex(frame.type)) and \(frame.payload.count) bytes: \(error.message) "
                    + "(TCPConfiguration.limits); nothing was sent, and the connection stays open")
        }
    }

    func close() async {
        let first = state.withLock { state -> Bool in
            defer { state.closing = true }
            return !state.closing
        }
        if first { logger.debug("closing the connection") }
        // Let the writer flush what was sent, then close; force it after a grace period.
        outboundQueue.finish()
        let channel = self.channel
        // Once the socket is closed, the reader must reach the end of its stream even if
        // nobody reads `inbound` any more: the frames left are queued without waiting for room.
        let inboundQueue = self.inboundQueue
        channel.closeFuture.whenComplete { _ in inboundQueue.removeBound() }
        let grace = configuration.handshakeTimeout
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                try? await Task.sleep(for: grace.cappedForSleep)
                if !Task.isCancelled { channel.close(promise: nil) }
            }
            await closed.wait()
            group.cancelAll()
        }
        // The caller was cancelled before the socket closed (its wait ended, and the grace
        // period's timer with it; an app going to the background): the writer still ends our
        // side and the reader reads to the peer's end, but within `closeLinger` the socket is
        // closed, even while the writer waits for room on a socket the peer does not read.
        if !closed.isOpen {
            let linger = TimeAmount.nanoseconds(Int64(closeLinger / .nanoseconds(1)))
            let deadline = channel.eventLoop.scheduleTask(in: linger) { channel.close(promise: nil) }
            channel.closeFuture.whenComplete { _ in deadline.cancel() }
        }
    }

    /// Returns once the socket is closed and `inbound` is finished.
    func waitUntilClosed() async {
        await closed.wait()
    }

    // MARK: Running

    /// Runs the connection until it ends. Called by the task that owns the
    /// socket, right after the handshake, with the rest of its inbound stream.
    func run(
        inbound iterator: inout NIOAsyncChannelInboundStream<Envelope>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
        keys: SessionKeys
    ) async {
        let codec = FrameCodec(limits: configuration.limits)
        let sealer = FrameSealer(key: keys.outbound, version: keys.version, codec: codec)
        var opener = FrameOpener(key: keys.inbound, version: keys.version, codec: codec)
        state.withLock {
            $0.lastHeard = .now
            $0.lastSent = .now
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.writeLoop(outbound: outbound, sealer: sealer, codec: codec) }
            // Zero or less turns either off: it would send heartbeats back to back, or close at once.
            if configuration.heartbeatInterval > .zero { group.addTask { await self.heartbeatLoop() } }
            if configuration.deadPeerTimeout > .zero { group.addTask { await self.watchdogLoop() } }
            let failure = await readLoop(&iterator, opener: &opener)
            end(with: failure)
            group.cancelAll()
        }
    }

    /// Called once the socket is closed.
    func didClose() {
        closed.open()
    }

    /// Reads until the stream ends; returns the error that ended it, if any.
    private func readLoop(
        _ iterator: inout NIOAsyncChannelInboundStream<Envelope>.AsyncIterator,
        opener: inout FrameOpener
    ) async -> TransportError? {
        do {
            while let envelope = try await iterator.next() {
                activity.didDeliver()
                state.withLock {
                    $0.lastHeard = .now
                    $0.statistics.bytesReceived += envelope.wireSize
                }
                let frame = try opener.open(envelope)
                switch frame.type {
                case TransportFrameType.heartbeat:
                    continue
                case TransportFrameType.error:
                    let message = try TransportMessage.ErrorMessage(frame)
                    throw message.transportError(from: "the peer")  // escaped and bounded
                case Frame.firstReservedType...:
                    throw TransportError(
                        .protocolViolation, "unexpected transport frame type 0x\(hex(frame.type)) after the handshake")
                default:
                    state.withLock {
                        $0.statistics.framesReceived += 1
                        $0.readerWaitsForConsumer = true
                    }
                    defer {
                        state.withLock {
                            $0.readerWaitsForConsumer = false
                            $0.lastHeard = .now
                        }
                    }
                    try await inboundQueue.push(frame, cost: frame.payload.count + FrameEnvelope.headerSize)
                }
            }
            return state.withLock { $0.closeReason }
        } catch {
            return state.withLock { $0.closeReason } ?? Self.transportError(error)
        }
    }

    /// Frames queued together go to the socket in one write, up to about this many payload bytes.
    static let writeBatchBytes = 64 * 1024

    private func writeLoop(outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, sealer: FrameSealer, codec: FrameCodec) async {
        var sealer = sealer
        do {
            while let first = try await outboundQueue.pop() {
                // The frames queued behind it go with it: one hand-off to the event loop, one flush.
                var frames = [first]
                var queuedBytes = first.payload.count
                while queuedBytes < Self.writeBatchBytes, let next = outboundQueue.popQueued() {
                    frames.append(next)
                    queuedBytes += next.payload.count
                }
                var buffers: [ByteBuffer] = []
                buffers.reserveCapacity(frames.count)
                var sent = (bytes: 0, frames: 0, payload: 0)
                for frame in frames {
                    let bytes = try codec.encodeEnvelope(try sealer.seal(frame))
                    buffers.append(ByteBuffer(bytes: bytes))
                    sent.bytes += bytes.count
                    if frame.type < Frame.firstReservedType {
                        sent.frames += 1
                        sent.payload += frame.payload.count
                    }
                }
                try await outbound.write(contentsOf: buffers)
                state.withLock {
                    $0.lastSent = .now
                    $0.statistics.bytesSent += sent.bytes
                    $0.statistics.framesSent += sent.frames
                    $0.statistics.payloadBytesSent += sent.payload
                    $0.statistics.socketWrites += 1
                }
            }
        } catch is CancellationError {
            channel.close(promise: nil)
            return
        } catch {
            let failure = Self.transportError(error)
            state.withLock { if $0.closeReason == nil, !$0.closing { $0.closeReason = failure } }
            channel.close(promise: nil)
            return
        }
        // Everything queued was written. Closed by `close()`: end our side only, so
        // that the peer reads our frames, then the end, and closes its side; the
        // reader takes what the peer sent meanwhile and ends at its end of stream.
        // Closed at once with the peer's bytes unread, the socket would be reset:
        // the peer would report a failure, and lose what it had not read yet.
        if !state.withLock({ $0.readerEnded }) {
            channel.close(mode: .output, promise: nil)
            try? await Task.sleep(for: closeLinger)
        }
        channel.close(promise: nil)
    }

    /// How long a closing connection waits for the peer to close its side
    /// (a peer that stopped reading), after its own frames were written:
    /// `TCPConfiguration.closeLinger`, within zero and `handshakeTimeout`
    /// (and `Duration.longestSleep`).
    var closeLinger: Duration {
        max(.zero, min(configuration.closeLinger, configuration.handshakeTimeout)).cappedForSleep
    }

    private func heartbeatLoop() async {
        let interval = configuration.heartbeatInterval
        while !Task.isCancelled {
            let lastSent = state.withLock { $0.lastSent }
            let due = lastSent + interval
            if ContinuousClock.now >= due {
                do {
                    state.withLock { $0.lastSent = .now }
                    try await outboundQueue.push(Frame(type: TransportFrameType.heartbeat, payload: []), cost: FrameEnvelope.headerSize)
                } catch {
                    return
                }
            } else {
                do { try await Task.sleep(until: due.cappedForSleep, clock: .continuous) } catch { return }
            }
        }
    }

    private func watchdogLoop() async {
        let timeout = configuration.deadPeerTimeout
        // A watchdog that wakes later than it asked was starved of CPU with the
        // rest of this process's tasks (an overloaded device, or a test process
        // whose two ends share one busy task pool): the peer gets the time that
        // was lost on top of its timeout, once per silence. Persistent starvation
        // still ends in a timeout, since only the time actually lost is added.
        let starvation = timeout / 10
        var grace = Duration.zero
        var silenceSince = ContinuousClock.now
        func sleep(until wake: ContinuousClock.Instant) async -> Bool {
            do { try await Task.sleep(until: wake.cappedForSleep, clock: .continuous) } catch { return false }
            let late = ContinuousClock.now - wake
            if late > starvation { grace += late }
            return true
        }
        while !Task.isCancelled {
            let (lastHeard, readerBlocked) = state.withLock { ($0.lastHeard, $0.readerWaitsForConsumer) }
            let socket = activity.snapshot
            let heard = max(lastHeard, socket.lastRead)
            if heard != silenceSince {
                silenceSince = heard
                grace = .zero
            }
            let deadline = heard + timeout + grace
            if readerBlocked || socket.envelopesWaiting {
                // Frames arrived and wait for us (a slow consumer or a busy
                // task pool), so the peer is alive: look again later.
                guard await sleep(until: .now + timeout) else { return }
            } else if ContinuousClock.now >= deadline {
                let error = TransportError(
                    .timeout,
                    "nothing arrived from the peer for \(timeout) (dead-peer timeout); the connection was closed")
                state.withLock { if $0.closeReason == nil { $0.closeReason = error } }
                logger.warning("closing a silent connection", metadata: ["reason": "\(error)"])
                channel.close(promise: nil)
                return
            } else {
                guard await sleep(until: deadline) else { return }
            }
        }
    }

    private func end(with failure: TransportError?) {
        let (reason, wasClosing) = state.withLock { state -> (TransportError?, Bool) in
            if state.closeReason == nil, let failure, !state.closing { state.closeReason = failure }
            let wasClosing = state.closing
            state.closing = true
            state.readerEnded = true
            return (state.closeReason, wasClosing)
        }
        if let reason {
            logger.warning("connection failed", metadata: ["reason": "\(reason)"])
        } else {
            logger.debug("connection ended", metadata: ["by": "\(wasClosing ? "us" : "peer")"])
        }
        inboundQueue.finish(throwing: reason)
        outboundQueue.finish()
        channel.close(promise: nil)
    }

    /// Maps any error from NIO or the codec to a `TransportError`.
    static func transportError(_ error: any Error) -> TransportError {
        if let error = error as? TransportError { return error }
        if let error = error as? ChannelError, error == .ioOnClosedChannel || error == .alreadyClosed {
            return TransportError(.closed, "the connection is closed")
        }
        return TransportError(.closed, "the connection was lost: \(error)")
    }
}

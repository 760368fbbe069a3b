import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Dials authenticated, encrypted TCP connections to a `TCPListener`.
public enum TCPTransport {
    /// Connects to `host:port`, runs the handshake as the dialer and returns
    /// the connection once both ends proved the pairing secret.
    ///
    /// Throws `.connectFailed` when the socket cannot connect (or `port` is
    /// not within 0...65535),
    /// `.authenticationFailed` when the listener holds another secret,
    /// `.unsupportedVersion` when no wire version is common (the message names
    /// both ranges), `.timeout` when the handshake takes longer than
    /// `handshakeTimeout`.
    public static func connect(host: String, port: Int, configuration: TCPConfiguration) async throws -> any FrameConnection {
        try await connectTCP(host: host, port: port, configuration: configuration)
    }

    static func connectTCP(host: String, port: Int, configuration: TCPConfiguration) async throws -> TCPConnection {
        try checkPort(port, "cannot connect to \(host):\(port)")
        let channel: TransportChannel
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelOption(.writeBufferWaterMark, value: waterMark(configuration))
                .connectTimeout(TimeAmount(configuration.handshakeTimeout))
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try configurePipeline(channel, handshakeFrames: 1, configuration: configuration)
                    }
                }
        } catch {
            throw TransportError(.connectFailed, "cannot connect to \(host):\(port): \(error)")
        }
        return try await establish(channel, role: .dialer, configuration: configuration)
    }

    /// Throws `.connectFailed` unless `port` is a TCP port: the resolver
    /// would cut it to 16 bits (65536 is 0, 70000 is 4464).
    static func checkPort(_ port: Int, _ context: @autoclosure () -> String) throws {
        guard (0...65535).contains(port) else {
            throw TransportError(.connectFailed, "\(context()): \(port) is not a TCP port (0...65535)")
        }
    }

    static func waterMark(_ configuration: TCPConfiguration) -> ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(2, configuration.maxPendingOutboundBytes)
        return .init(low: high / 2, high: high)
    }

    /// Adds the tap and the envelope decoder, and wraps the channel.
    /// Must run on the channel's event loop.
    static func configurePipeline(
        _ channel: any Channel, handshakeFrames: Int, configuration: TCPConfiguration
    ) throws -> TransportChannel {
        let operations = channel.pipeline.syncOperations
        let activity = SocketActivity()
        try operations.addHandler(SocketActivityHandler(activity: activity))
        if configuration.onWireBytes != nil || configuration.onWireByteCount != nil {
            try operations.addHandler(WireTapHandler(tap: configuration.onWireBytes, count: configuration.onWireByteCount))
        }
        try operations.addHandler(AuthenticationGate(activity: activity))
        try operations.addHandler(
            ByteToMessageHandler(
                EnvelopeDecoderHandler(limits: configuration.limits, handshakeFrames: handshakeFrames, activity: activity)))
        let asyncChannel = try NIOAsyncChannel<Envelope, ByteBuffer>(
            wrappingChannelSynchronously: channel,
            configuration: .init(backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8)))
        return TransportChannel(asyncChannel: asyncChannel, activity: activity)
    }

    /// A short description of the remote address, such as `tcp:127.0.0.1:4321`.
    static func describePeer(_ channel: any Channel) -> String {
        guard let address = channel.remoteAddress else { return "tcp:unknown" }
        return "tcp:\(address.ipAddress ?? "?"):\(address.port ?? 0)"
    }

    /// Runs the handshake on a fresh channel, then keeps the connection
    /// running in a task of its own. Returns once the handshake succeeded;
    /// throws (and closes the channel) when it failed, or the calling task
    /// was cancelled (`.closed`, saying so: not the peer's doing). A listener
    /// passes the `pairings` it built once from `configuration`.
    static func establish(
        _ transportChannel: TransportChannel, role: TransportRole, configuration: TCPConfiguration,
        pairings: ListenerPairings? = nil
    ) async throws -> TCPConnection {
        let channel = transportChannel.asyncChannel.channel
        let givenUp = Latch()
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TCPConnection, any Error>) in
                    Task {
                        await runLifetime(transportChannel, role: role, configuration: configuration, pairings: pairings,
                                          givenUp: givenUp, continuation: continuation)
                    }
                }
            } onCancel: {
                givenUp.open()
                channel.close(promise: nil)
            }
        } catch where givenUp.isOpen {
            // The channel closed by this side reads as "the peer closed the connection".
            throw TransportError(.closed, "the handshake with \(transportChannel.peer ?? describePeer(channel)) was given up: the task running it was cancelled")
        }
    }

    private static func runLifetime(
        _ transportChannel: TransportChannel, role: TransportRole, configuration: TCPConfiguration,
        pairings: ListenerPairings?, givenUp: Latch, continuation: CheckedContinuation<TCPConnection, any Error>
    ) async {
        let asyncChannel = transportChannel.asyncChannel
        let activity = transportChannel.activity
        let channel = asyncChannel.channel
        let peer = transportChannel.peer ?? describePeer(channel)
        var logger = configuration.logger
        logger[metadataKey: "peer"] = "\(peer)"
        logger[metadataKey: "role"] = "\(role)"
        let timedOut = Mutex(false)
        let timeout = configuration.handshakeTimeout
        let deadline = Task {
            try await Task.sleep(for: timeout.cappedForSleep)
            timedOut.withLock { $0 = true }
            channel.close(promise: nil)
        }
        var resumed = false
        var established: TCPConnection?
        do {
            try await asyncChannel.executeThenClose { inbound, outbound in
                var iterator = inbound.makeAsyncIterator()
                let keys: SessionKeys
                do {
                    keys = try await handshake(
                        role: role, iterator: &iterator, outbound: outbound, activity: activity, configuration: configuration,
                        pairings: pairings)
                    deadline.cancel()
                    // Only now may frames of full size come: the decoder goes on, reads resume.
                    activity.didAuthenticate()
                    channel.pipeline.fireUserInboundEventTriggered(AuthenticationGate.Authenticated())
                } catch {
                    deadline.cancel()
                    var failure = TCPConnection.transportError(error)
                    if timedOut.withLock({ $0 }) {
                        failure = TransportError(
                            .timeout, "the handshake did not finish within \(timeout); the connection was closed")
                    }
                    // The listener reports its rejections itself, within a rate
                    // limit (strangers can cause them at will); a dialer's
                    // attempts are paced by its reconnect backoff.
                    if role == .dialer, !givenUp.isOpen {
                        logger.warning("rejected the peer during the handshake", metadata: ["reason": "\(failure)"])
                    }
                    resumed = true
                    continuation.resume(throwing: failure)
                    return
                }
                let connection = TCPConnection(
                    channel: channel, activity: activity, version: keys.version, pairingEpoch: keys.pairingEpoch,
                    peer: peer, configuration: configuration)
                established = connection
                logger.info(
                    "connection authenticated", metadata: ["version": "\(keys.version)", "pairing": "\(keys.pairingEpoch)"])
                resumed = true
                continuation.resume(returning: connection)
                await connection.run(inbound: &iterator, outbound: outbound, keys: keys)
            }
        } catch {
            if !resumed {
                resumed = true
                continuation.resume(throwing: TCPConnection.transportError(error))
            }
        }
        deadline.cancel()
        established?.didClose()
    }

    /// Runs the role's handshake state machine over the channel.
    private static func handshake(
        role: TransportRole,
        iterator: inout NIOAsyncChannelInboundStream<Envelope>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
        activity: SocketActivity,
        configuration: TCPConfiguration,
        pairings: ListenerPairings?
    ) async throws -> SessionKeys {
        // The handshake's own bounds: `configuration.limits` hold for the app's frames, after it.
        let codec = FrameCodec(limits: EnvelopeDecoderHandler.handshakeLimits)
        func write(_ frame: Frame) async throws {
            try await outbound.write(ByteBuffer(bytes: codec.encode(frame, version: 1, allowCompression: false)))
        }
        func receive() async throws -> Frame {
            guard let envelope = try await iterator.next() else {
                throw TransportError(.closed, "the peer closed the connection during the handshake")
            }
            activity.didDeliver()
            return try codec.openHandshakeEnvelope(envelope)
        }
        // Only this role's machine: a listener looks its pairings up, never derives them again, per handshake.
        var machine: HandshakeMachine
        switch role {
        case .dialer:
            var dialer = DialerHandshake(
                secret: configuration.secret, versions: configuration.wireVersions, namesPairing: configuration.namesPairingInHello)
            try await write(dialer.start())
            machine = .dialer(dialer)
        case .listener:
            machine = .listener(
                ListenerHandshake(pairings: pairings ?? ListenerPairings(configuration), versions: configuration.wireVersions))
        }
        while true {
            let frame = try await receive()
            let action = machine.receive(frame)
            switch action {
            case .send(let reply):
                try await write(reply)
            case .sendAndEstablish(let reply, let keys):
                try await write(reply)
                return keys
            case .establish(let keys):
                return keys
            case .fail(let error, let notify):
                if let notify { try? await write(notify) }
                throw error
            }
        }
    }
}

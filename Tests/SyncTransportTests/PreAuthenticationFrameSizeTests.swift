import Foundation
import NIOCore
import NIOEmbedded
import Synchronization
import TestSupport
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// Until the handshake succeeded, nothing past the handshake's own small
/// frames is decoded or read: a stranger that sent a hello and a wrong proof
/// could follow them with a full-size (4 MiB) frame, buffered until the
/// handshake closed the socket (the listener's decoder took frames of any
/// size after its 2nd, the dialer's after its 1st), once per pending handshake.
@Suite(.timeLimit(.minutes(5))) struct PreAuthenticationFrameSizeTests {
    let secret = PairingSecret.generate()

    /// A frame of 4 MiB (the most a frame may carry), uncompressed.
    static func fullSizeFrame() throws -> [UInt8] {
        try FrameCodec().encode(Frame(type: 0x02, payload: [UInt8](repeating: 0x5A, count: FrameLimits.default.maxFrameSize)),
                                allowCompression: false)
    }

    static func handshakeFrames() throws -> [UInt8] {
        let plain = FrameCodec()
        return try plain.encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame, allowCompression: false)
            + plain.encode(TransportMessage.Proof(proof: makeNonce()).frame, allowCompression: false)
    }

    /// The listener's decoder gives its two handshake frames and nothing
    /// after them until the handshake succeeded.
    @Test func theListenersDecoderHoldsAFullSizeFrameUntilAuthenticated() throws {
        let activity = SocketActivity()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(EnvelopeDecoderHandler(limits: .default, handshakeFrames: 2, activity: activity)))
        try channel.writeInbound(ByteBuffer(bytes: Self.handshakeFrames() + Self.fullSizeFrame()))
        #expect(try channel.readInbound(as: Envelope.self)?.type == TransportFrameType.hello)
        #expect(try channel.readInbound(as: Envelope.self)?.type == TransportFrameType.proof)
        #expect(try channel.readInbound(as: Envelope.self) == nil, "a full-size frame decoded before authentication")
        #expect(activity.holdsReads, "reads go on before authentication")
        // Once the handshake succeeded, the frame comes.
        activity.didAuthenticate()
        #expect(!activity.holdsReads)
        try channel.writeInbound(ByteBuffer())
        let frame = try #require(try channel.readInbound(as: Envelope.self))
        #expect(frame.type == 0x02 && frame.payload.count == FrameLimits.default.maxFrameSize)
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    /// Over a socket: a stranger sends a hello, a wrong proof and a 4 MiB
    /// frame. The listener refuses the proof and closes; it read little of
    /// the frame (it stops reading once the handshake's frames are in).
    @Test func aStrangersFullSizeFrameIsNotReadBeforeAuthentication() async throws {
        let inbound = Mutex(0)
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret) { configuration in
                configuration.onWireByteCount = { direction, count in
                    if direction == .inbound { inbound.withLock { $0 += count } }
                }
            })
        let plain = FrameCodec()
        let big = try Self.fullSizeFrame()
        try await withRawClient(port: listener.port) { session in
            try await session.send(plain.encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame, allowCompression: false))
            let challenge = try #require(try await session.nextEnvelope())
            #expect(challenge.type == TransportFrameType.challenge)
            // The listener may close while this is written: a write error is expected then.
            try? await session.send(plain.encode(TransportMessage.Proof(proof: makeNonce()).frame, allowCompression: false) + big)
            _ = await session.readToEnd()
        }
        let rejection = try await first(of: listener.rejections, "the rejection of the wrong proof")
        #expect(rejection.code == .authenticationFailed, "\(rejection)")
        let read = inbound.withLock { $0 }
        #expect(read < big.count / 4, "the listener read \(read) bytes before authentication")
        await listener.close()
    }
}

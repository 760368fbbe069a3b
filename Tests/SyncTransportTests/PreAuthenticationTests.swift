import Foundation
import NIOCore
import NIOEmbedded
import Synchronization
import TestSupport
import Testing
@_spi(Benchmarks) @testable import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// Before a peer authenticated it gets no work beyond what its bytes justify
/// (no inflating, exact message lengths), and nothing it wrote reaches our
/// logs, errors or events.
@Suite(.timeLimit(.minutes(5))) struct PreAuthenticationTests {
    let secret = PairingSecret.generate()

    /// A hello whose compressed payload fits the 4096-byte handshake limit and
    /// inflates to about 4 MB (what a stranger sent in the issue).
    static func compressedHello() throws -> [UInt8] {
        var plain = TransportMessage.Hello(versions: 1...1, nonce: [UInt8](repeating: 0x42, count: 32)).frame.payload
        plain += [UInt8](repeating: 0, count: 4_150_000)
        let deflated = try Compression.deflate(plain, level: 9)
        #expect(deflated.count <= EnvelopeDecoderHandler.handshakeFrameLimit)
        return try FrameCodec().encodeEnvelope(Envelope(type: TransportFrameType.hello, flags: .compressed, payload: deflated))
    }

    func decoderChannel(handshakeFrames: Int) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(
                EnvelopeDecoderHandler(limits: .default, handshakeFrames: handshakeFrames, activity: SocketActivity())))
        return channel
    }

    // MARK: Compressed frames before authentication

    @Test func compressedHandshakeFrameIsRefusedAtItsHeader() throws {
        let hello = try Self.compressedHello()
        let channel = try decoderChannel(handshakeFrames: 2)
        // Five header bytes are enough: magic, version, type, flags.
        let error = expectCode(.protocolViolation) { try channel.writeInbound(ByteBuffer(bytes: hello.prefix(5))) }
        #expect(error?.message.contains("compressed") == true)
        _ = try? channel.finish(acceptAlreadyClosed: true)

        // After the handshake frames, compressed frames are normal.
        let after = try decoderChannel(handshakeFrames: 0)
        try after.writeInbound(ByteBuffer(bytes: hello))
        let envelope = try #require(try after.readInbound(as: Envelope.self))
        #expect(envelope.flags == .compressed)
        _ = try after.finish()
    }

    @Test func handshakeReceivePathNeverInflates() throws {
        let hello = try Self.compressedHello()
        let envelope = try FrameCodec().decodeEnvelope(hello)
        expectCode(.protocolViolation) { _ = try FrameCodec().openHandshakeEnvelope(envelope) }
        let plain = Envelope(type: TransportFrameType.proof, payload: makeNonce())
        #expect(try FrameCodec().openHandshakeEnvelope(plain) == Frame(type: TransportFrameType.proof, payload: plain.payload))
    }

    @Test func compressedHelloIsRefusedOverTCPWithoutAChallenge() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret, logs: logs) { $0.handshakeTimeout = .seconds(3) })
        let hello = try Self.compressedHello()
        let answer = try await withRawClient(port: listener.port) { session -> [UInt8] in
            try await session.send(hello)
            return await session.readToEnd()
        }
        let rejection = try await first(of: listener.rejections, "the rejection of the compressed hello")
        #expect(rejection.code == .protocolViolation, "\(rejection)")
        #expect(rejection.message.contains("compressed"))
        // No challenge was computed or sent.
        var decoder = FrameDecoder()
        decoder.append(answer)
        #expect((try? decoder.nextEnvelope())??.type != TransportFrameType.challenge)
        await listener.close()
    }

    // MARK: Exact lengths

    @Test func handshakeMessagesMustHaveTheirExactLength() throws {
        let hello = TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame
        #expect(hello.payload.count == 34)
        #expect(try TransportMessage.Hello(hello) == TransportMessage.Hello(versions: 1...1, nonce: Array(hello.payload[2...])))
        expectCode(.protocolViolation) { _ = try TransportMessage.Hello(Frame(type: hello.type, payload: hello.payload + [0])) }

        let challenge = TransportMessage.Challenge(version: 1, nonce: makeNonce(), proof: makeNonce()).frame
        #expect(challenge.payload.count == 65)
        _ = try TransportMessage.Challenge(challenge)
        expectCode(.protocolViolation) {
            _ = try TransportMessage.Challenge(Frame(type: challenge.type, payload: challenge.payload + [0]))
        }

        let proof = TransportMessage.Proof(proof: makeNonce()).frame
        #expect(proof.payload.count == 32)
        _ = try TransportMessage.Proof(proof)
        expectCode(.protocolViolation) { _ = try TransportMessage.Proof(Frame(type: proof.type, payload: proof.payload + [0])) }

        let error = TransportMessage.ErrorMessage(TransportError(.timeout, "late")).frame
        _ = try TransportMessage.ErrorMessage(error)
        expectCode(.protocolViolation) {
            _ = try TransportMessage.ErrorMessage(Frame(type: error.type, payload: error.payload + [0]))
        }
        // Too short stays a truncated frame.
        expectCode(.truncatedFrame) { _ = try TransportMessage.Hello(Frame(type: hello.type, payload: Array(hello.payload.prefix(33)))) }
    }

    // MARK: Nothing a stranger wrote is logged

    static let forged = "bad\n2026-01-01T00:00:00 info syncsim : FORGED-LINE accepted peer\r\u{1b}[2K"

    /// A POSIX listener that answers whatever arrives first with `reply`, then closes.
    final class RawReplyServer: Sendable {
        let port: Int
        private let fd: Int32

        init(reply: [UInt8]) throws {
            let fd = PortablePOSIX.streamSocket()
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, $0, &length) == 0
                }
            }
            guard bound else {
                close(fd)
                throw TransportError(.connectFailed, "raw server: bind failed")
            }
            self.fd = fd
            port = Int(UInt16(bigEndian: address.sin_port))
            let listening = fd
            Thread {
                let peer = accept(listening, nil, nil)
                guard peer >= 0 else { return }
                var buffer = [UInt8](repeating: 0, count: 4_096)
                _ = read(peer, &buffer, buffer.count)
                _ = reply.withUnsafeBytes { send(peer, $0.baseAddress, reply.count, PortablePOSIX.noSignalFlags) }
                close(peer)
            }.start()
        }

        deinit { close(fd) }
    }

    func errorFrame(code: String, message: String) throws -> [UInt8] {
        var writer = ByteWriter()
        writer.writeString(code)
        writer.writeString(message)
        return try FrameCodec().encode(Frame(type: TransportFrameType.error, payload: writer.bytes), allowCompression: false)
    }

    @Test func listenerErrorTextBeforeAuthenticationIsNeverLogged() async throws {
        for (code, expected) in [("authentication-failed", TransportError.Code.authenticationFailed),
                                 ("unsupported-version", .unsupportedVersion),
                                 ("no-such-code\nFORGED-LINE", .closed)] {
            let server = try RawReplyServer(reply: try errorFrame(code: code, message: Self.forged))
            let logs = LogCapture()
            let error = await expectCode(expected) {
                _ = try await TCPTransport.connect(host: "127.0.0.1", port: server.port, configuration: testConfiguration(secret, logs: logs))
            }
            #expect(error?.message.contains("FORGED") == false, "\(String(describing: error))")
            #expect(error?.message.contains("\n") == false)
            #expect(!logs.all.isEmpty)
            #expect(!logs.all.contains { $0.contains("FORGED") || $0.contains("\n") }, "\(logs.all)")
        }
    }

    @Test func dialerErrorTextBeforeAuthenticationIsNeverLoggedNorReported() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
        let frame = try errorFrame(code: "authentication-failed", message: Self.forged)
        _ = try await withRawClient(port: listener.port) { session -> [UInt8] in
            try await session.send(frame)
            return await session.readToEnd()
        }
        let rejection = try await first(of: listener.rejections, "the rejection of the forged error frame")
        #expect(rejection.code == .authenticationFailed)
        #expect(!rejection.message.contains("FORGED") && !rejection.message.contains("\n"), "\(rejection)")
        await listener.close()
        #expect(!logs.all.contains { $0.contains("FORGED") || $0.contains("\n") }, "\(logs.all)")
    }

    @Test func peerErrorTextAfterAuthenticationIsEscaped() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
        let long = String(repeating: "x", count: 900)
        let raw = Task { [secret] in
            try await withRawClient(port: listener.port) { session -> [UInt8] in
                var sealer = try await session.handshake(secret: secret)
                var writer = ByteWriter()
                writer.writeString("protocol-violation\nFORGED-CODE")
                writer.writeString(Self.forged + long)
                let sealed = try sealer.seal(Frame(type: TransportFrameType.error, payload: writer.bytes))
                try await session.send(FrameCodec().encodeEnvelope(sealed))
                return await session.readToEnd()
            }
        }
        let accepted = try await first(of: listener.connections, "the authenticated connection")
        let end = try await inboundEnd(of: accepted)
        let error = try #require(end.error)
        #expect(error.message.contains("bad\\n2026-01-01T00:00:00 info syncsim : FORGED-LINE"), "\(error)")
        #expect(error.message.contains("\\u{1b}[2K"))
        #expect(!error.message.contains("\n") && !error.message.contains("\r") && !error.message.contains("\u{1b}"))
        #expect(!error.code.rawValue.contains("\n"))
        #expect(error.message.count < 400, "peer text is bounded")
        _ = try await raw.value
        await listener.close()
        #expect(logs.all.contains { $0.contains("FORGED-LINE") }, "the escaped text is logged")
        #expect(!logs.all.contains { $0.contains("\n") || $0.contains("\r") || $0.contains("\u{1b}") }, "\(logs.all)")
    }

    @Test func peerTextEscapesControlAndFormatCharacters() {
        #expect(PeerText.escaped("plain text, ünïcödé 🙂") == "plain text, ünïcödé 🙂")
        #expect(PeerText.escaped("a\nb\rc\td\\e") == "a\\nb\\rc\\td\\\\e")
        #expect(PeerText.escaped("\u{1b}[31mred\u{7f}\u{0}") == "\\u{1b}[31mred\\u{7f}\\u{0}")
        #expect(PeerText.escaped("left\u{202e}right\u{2028}next") == "left\\u{202e}right\\u{2028}next")
        let bounded = PeerText.escaped(String(repeating: "\n", count: 1_000), maxLength: 20)
        #expect(bounded.unicodeScalars.count <= 21 && bounded.hasSuffix("…"))
        #expect(PeerText.escaped(String(repeating: "y", count: 20), maxLength: 20) == String(repeating: "y", count: 20))
    }
}

import Foundation
import Synchronization
import Testing
@_spi(Benchmarks) @testable import SyncTransport

@Suite(.timeLimit(.minutes(5))) struct TCPTransportTests {
    let secret = PairingSecret.generate()

    enum Link: String, CaseIterable { case memory, tcp }

    /// Two connected ends over the chosen link (and the listener, for TCP).
    func connectedPair(_ link: Link, logs: LogCapture? = nil, tap: WireRecorder? = nil) async throws
        -> (any FrameConnection, any FrameConnection, TCPListener?) {
        switch link {
        case .memory:
            let (a, b) = InMemoryConnection.makePair()
            return (a, b, nil)
        case .tcp:
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
            let dialer = try await TCPTransport.connect(
                host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret, logs: logs, tap: tap))
            let accepted = try await first(of: listener.connections, "the accepted connection")
            return (dialer, accepted, listener)
        }
    }

    @Test(arguments: Link.allCases)
    func framesRoundTripBothWays(over link: Link) async throws {
        let logs = LogCapture()
        let (dialer, listener, server) = try await connectedPair(link, logs: logs)
        #expect(listener.peerDescription.hasPrefix(link == .tcp ? "tcp:127.0.0.1:" : "memory:"))
        let frames = [
            Frame(type: 1, payload: []),
            Frame(type: 2, payload: Array("hello watch".utf8)),
            Frame(type: 3, payload: [UInt8](repeating: 7, count: 100_000)),
            Frame(type: 0xEF, payload: randomBytes(1 << 20, seed: 11)),
        ]
        for frame in frames { try await dialer.send(frame) }
        #expect(try await receive(frames.count, from: listener) == frames)
        for frame in frames.reversed() { try await listener.send(frame) }
        #expect(try await receive(frames.count, from: dialer) == frames.reversed())

        let stats = dialer.statistics
        #expect(stats.framesSent == 4 && stats.framesReceived == 4)
        #expect(stats.payloadBytesSent == 100_011 + (1 << 20))
        if link == .tcp {
            #expect(stats.bytesSent < stats.payloadBytesSent, "the repetitive frame was compressed")
            #expect(stats.bytesSent > 1 << 20)
        }
        // Closing one end finishes the other's inbound normally.
        await dialer.close()
        let end = try await inboundEnd(of: listener)
        #expect(end.frames.isEmpty && end.error == nil)
        await expectCode(.closed) { try await dialer.send(Frame(type: 1, payload: [])) }
        await listener.close()
        await server?.close()
        if link == .tcp {
            #expect(!logs.all.isEmpty)
            let secretHex = secret.bytes.map { String(format: "%02x", $0) }.joined()
            let secretBase64 = Data(secret.bytes).base64EncodedString()
            #expect(!logs.all.contains { $0.contains(secretHex) || $0.contains(secretBase64) })
        }
    }

    @Test func reservedTypesCannotBeSent() async throws {
        let (dialer, _, server) = try await connectedPair(.tcp)
        await expectCode(.protocolViolation) { try await dialer.send(Frame(type: TransportFrameType.heartbeat, payload: [])) }
        await dialer.close()
        await server?.close()
    }

    /// Before: `send` took type 0x00 (the peer's reader would deliver it),
    /// though its refusal of the transport's types says the app's are
    /// 0x01...0xEF, as `Frame` and the wire format do. Now 0x00 is refused
    /// with that message too, and the connection goes on. The in-memory
    /// connection took every type (0x00 and 0xF0...0xFF too): a test over it
    /// passed what TCP refuses. It refuses the same now, with the same error.
    @Test(arguments: Link.allCases)
    func typeZeroIsRefusedLikeTheTransportsTypes(over link: Link) async throws {
        let (dialer, accepted, server) = try await connectedPair(link)
        for type: UInt8 in [0x00, 0xF0, 0xFF] {
            let error = await expectCode(.protocolViolation) { try await dialer.send(Frame(type: type, payload: [type])) }
            #expect(error?.message.contains("frame type 0x\(hex(type))") == true, "\(String(describing: error))")
            #expect(error?.message.contains("use 0x01...0xEF") == true, "\(String(describing: error))")
        }
        try await dialer.send(Frame(type: 0x01, payload: [1]))
        try await dialer.send(Frame(type: 0xEF, payload: [2]))
        #expect(try await receive(2, from: accepted) == [Frame(type: 0x01, payload: [1]), Frame(type: 0xEF, payload: [2])])
        await dialer.close()
        #expect(try await inboundEnd(of: accepted).error == nil, "nothing refused reached the peer")
        await accepted.close()
        await server?.close()
    }

    @Test func wrongSecretIsRejectedOnBothSidesAndNothingIsDelivered() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
        let stranger = PairingSecret.generate()
        let error = await expectCode(.authenticationFailed) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(stranger, logs: logs))
        }
        // The stranger's hello names a pairing the listener does not hold: refused before any proof.
        #expect(error?.message.contains("could not verify that we hold its pairing secret") == true, "\(String(describing: error))")
        let rejection = try await first(of: listener.rejections, "the rejection of the stranger")
        #expect(rejection.code == .authenticationFailed)

        // A rogue dialer that ignores the listener's proof and sends a forged one.
        let port = listener.port
        let answer = try await withDeadline("the listener to answer and close the rogue dialer") {
            try await withRawClient(port: port) { session -> [UInt8] in
                try await session.send(FrameCodec().encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame))
                _ = try #require(try await session.nextEnvelope())
                try await session.send(FrameCodec().encode(TransportMessage.Proof(proof: makeNonce()).frame))
                return await session.readToEnd()
            }
        }
        #expect(!answer.isEmpty)
        let forged = try await first(of: listener.rejections, "the rejection of the forged proof")
        #expect(forged.code == .authenticationFailed)
        #expect(forged.message.contains("the dialer could not prove") == true)

        await listener.close()
        #expect(try await all(of: listener.connections, "the connections to end after close").isEmpty)
        #expect(logs.all.contains { $0.contains("rejected the peer") && $0.contains("authentication-failed") })
        for secret in [secret, stranger] {
            #expect(!logs.all.contains { $0.contains(Data(secret.bytes).base64EncodedString()) })
        }
    }

    @Test func versionMismatchNamesBothRanges() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let error = await expectCode(.unsupportedVersion) {
            _ = try await TCPTransport.connect(
                host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret) { $0.wireVersions = 2...3 })
        }
        #expect(error?.message.contains("no wire version in common with ours (2...3)") == true, "\(String(describing: error))")
        let rejection = try await first(of: listener.rejections, "the rejection of the other version")
        #expect(rejection.code == .unsupportedVersion)
        #expect(rejection.message == "no common wire version: ours 1...1, peer 2...3")
        await listener.close()
    }

    @Test func recordedHandshakeCannotBeReplayed() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let recorder = WireRecorder()
        let dialer = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret, tap: recorder))
        let accepted = try await first(of: listener.connections, "the genuine dialer's connection")
        try await dialer.send(Frame(type: 1, payload: Array("transfer 100".utf8)))
        _ = try await receive(1, from: accepted)
        await dialer.close()
        await accepted.close()
        let recording = recorder.bytes(.outbound)

        // Replay everything the genuine dialer sent: hello, proof, the sealed frame.
        let port = listener.port
        _ = try await withDeadline("the listener to close the replaying client") {
            try await withRawClient(port: port) { session -> [UInt8] in
                try await session.send(recording)
                return await session.readToEnd()
            }
        }
        let rejection = try await first(of: listener.rejections, "the rejection of the replay")
        #expect(rejection.code == .authenticationFailed)
        await listener.close()
        #expect(try await all(of: listener.connections, "the connections to end after close").isEmpty,
                "no connection was accepted from the replay")
    }

    @Test func garbageClosesTheConnectionAndTheListenerKeepsWorking() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let inputs: [([UInt8], TransportError.Code)] = [
            (Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), .badMagic),
            (randomBytes(5_000, seed: 5).map { $0 == 0x53 ? 0 : $0 }, .badMagic),
            ([0x53, 0x59, 1, 0xF0, 0, 0x00, 0x89, 0x54, 0x40, 0, 0, 0, 0], .oversizedFrame),
            ([0x53, 0x59, 7, 0xF0, 0, 0, 0, 0, 0, 0, 0, 0, 0], .unsupportedVersion),
            ([0x53, 0x59, 1, 0xF0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 2], .checksumMismatch),
            ([0x53, 0x59, 1, 0xF0, 0, 0, 0, 0, 34], .truncatedFrame),
        ]
        let port = listener.port
        for (input, code) in inputs {
            _ = try await withDeadline("the listener to close the connection that sent \(code) input") {
                try await withRawClient(port: port) { session -> [UInt8] in
                    try await session.send(input)
                    if code == .truncatedFrame {
                        // Half-close so the listener sees the end inside the frame.
                        session.outbound.finish()
                    }
                    return await session.readToEnd()
                }
            }
            let rejection = try await first(of: listener.rejections, "the rejection of \(code) input")
            #expect(rejection.code == code, "\(String(describing: rejection))")
        }
        // Still accepting.
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "a connection after the bad ones")
        try await dialer.send(Frame(type: 1, payload: [42]))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [42])])
        await dialer.close()
        await listener.close()
    }

    enum BadInput: String, CaseIterable {
        case tampered, replayed, reordered, garbage, oversized, checksum, truncated, wrongVersion, plaintext, bomb
    }

    @Test(arguments: BadInput.allCases)
    func badInputAfterTheHandshakeFailsTheConnection(_ input: BadInput) async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let codec = FrameCodec()
        let rawTask = Task { [secret] in
            try await withRawClient(port: listener.port) { session -> [UInt8] in
                var sealer = try await session.handshake(secret: secret)
                let first = try sealer.seal(Frame(type: 1, payload: Array("first".utf8)))
                try await session.send(codec.encodeEnvelope(first))
                var next = sealer
                let second = try next.seal(Frame(type: 1, payload: Array("second".utf8)))
                switch input {
                case .tampered:
                    var bad = second
                    bad.payload[0] ^= 0x01
                    try await session.send(codec.encodeEnvelope(bad))
                case .replayed:
                    try await session.send(codec.encodeEnvelope(first))
                case .reordered:
                    let third = try next.seal(Frame(type: 1, payload: [3]))
                    try await session.send(codec.encodeEnvelope(third))
                case .garbage:
                    try await session.send(randomBytes(100, seed: 1).map { $0 == 0x53 ? 0 : $0 })
                case .oversized:
                    try await session.send([0x53, 0x59, 1, 1, 2, 0x00, 0x89, 0x54, 0x40])
                case .checksum:
                    var bytes = try codec.encodeEnvelope(second)
                    bytes[10] ^= 0xFF
                    try await session.send(bytes)
                case .truncated:
                    try await session.send(Array(try codec.encodeEnvelope(second).dropLast(5)))
                    session.outbound.finish()
                case .wrongVersion:
                    var bytes = try codec.encodeEnvelope(second)
                    bytes[2] = 9
                    try await session.send(bytes)
                case .plaintext:
                    try await session.send(codec.encode(Frame(type: 1, payload: [1])))
                case .bomb:
                    let bomb = try Compression.deflate([UInt8](repeating: 0, count: 9 << 20), level: 9)
                    let sealed = try sealer.seal(envelope: Envelope(type: 1, flags: .compressed, payload: bomb))
                    try await session.send(codec.encodeEnvelope(sealed))
                }
                return await session.readToEnd()
            }
        }
        let accepted = try await first(of: listener.connections, "the raw client's connection")
        let end = try await inboundEnd(of: accepted)
        let expected: [BadInput: TransportError.Code] = [
            .tampered: .decryptionFailed, .replayed: .decryptionFailed, .reordered: .decryptionFailed,
            .garbage: .badMagic, .oversized: .oversizedFrame, .checksum: .checksumMismatch,
            .truncated: .truncatedFrame, .wrongVersion: .unsupportedVersion, .plaintext: .decryptionFailed,
            .bomb: .decompressionFailed,
        ]
        #expect(end.frames == [Frame(type: 1, payload: Array("first".utf8))], "only the good frame was delivered")
        #expect(end.error?.code == expected[input], "\(String(describing: end.error))")
        _ = try await withDeadline("the listener to close the raw client's socket") { try await rawTask.value }
        await expectCode(.closed) { try await accepted.send(Frame(type: 1, payload: [])) }
        await listener.close()
    }

    @Test func byteCounterAgreesWithTheTapInEachDirection() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let recorder = WireRecorder()
        let counted = Mutex<[WireDirection: Int]>([:])
        let dialer = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port,
            configuration: testConfiguration(secret, tap: recorder) { configuration in
                configuration.onWireByteCount = { direction, count in counted.withLock { $0[direction, default: 0] += count } }
            })
        let accepted = try await first(of: listener.connections, "the accepted connection")
        // Reliable while open: sessions over it do not retransmit (the in-memory pair neither).
        #expect(dialer.deliversEveryFrame && accepted.deliversEveryFrame)
        let (memoryA, memoryB) = InMemoryConnection.makePair()
        #expect(memoryA.deliversEveryFrame && memoryB.deliversEveryFrame)
        let frames = [Frame(type: 1, payload: randomBytes(3_000, seed: 5)), Frame(type: 2, payload: Array("small".utf8))]
        for frame in frames { try await dialer.send(frame) }
        #expect(try await receive(2, from: accepted) == frames)
        for frame in frames { try await accepted.send(frame) }
        #expect(try await receive(2, from: dialer) == frames)
        await dialer.close()
        await accepted.close()
        await listener.close()
        let outbound = counted.withLock { $0[.outbound] ?? 0 }, inbound = counted.withLock { $0[.inbound] ?? 0 }
        #expect(outbound == recorder.bytes(.outbound).count)
        #expect(inbound == recorder.bytes(.inbound).count)
        #expect(outbound > 3_000 && inbound > 3_000)
    }

    @Test func tappedBytesContainNoPlaintext() async throws {
        let recorder = WireRecorder()
        let (dialer, listener, server) = try await connectedPair(.tcp, tap: recorder)
        let marker = Array("PLAINTEXT-MARKER-7f3a".utf8)
        let frames = [
            Frame(type: 1, payload: marker),
            Frame(type: 2, payload: randomBytes(500, seed: 2) + marker + randomBytes(500, seed: 3)),
            Frame(type: 3, payload: Array(repeating: marker, count: 50).flatMap { $0 }),
        ]
        for frame in frames { try await dialer.send(frame) }
        for frame in frames { try await listener.send(frame) }
        #expect(try await receive(3, from: listener) == frames)
        #expect(try await receive(3, from: dialer) == frames)
        #expect(recorder.bytes(.outbound).count > 1_000 && recorder.bytes(.inbound).count > 1_000)
        #expect(!contains(recorder.all, marker))
        #expect(!contains(recorder.all, Array(marker.prefix(8))))
        #expect(!contains(recorder.all, Array(secret.bytes.prefix(8))))
        await dialer.close()
        await server?.close()
    }
}

import Foundation
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// Golden frames of wire format version 1 in `Fixtures/wire/v1/`, decoded
/// forever. Write new files with `SYNCTRANSPORT_WRITE_GOLDENS=1 swift test
/// --filter GoldenWireTests`: it writes only files that do not exist yet,
/// never changes an existing one.
@Suite struct GoldenWireTests {
    static let folder = fixturesPath("wire/v1")
    static let secret = try! PairingSecret(bytes: Array(0..<32))
    static let dialerNonce: [UInt8] = (0..<32).map { 0x40 + $0 }
    static let listenerNonce: [UInt8] = (0..<32).map { 0x80 + $0 }
    static let transcript = HandshakeTranscript(
        secret: secret, dialerVersions: 1...1, version: 1, dialerNonce: dialerNonce, listenerNonce: listenerNonce)
    static let helloWatch = Frame(type: 0x01, payload: Array("hello, watch".utf8))
    static let repetitive = Frame(type: 0x02, payload: Array(String(repeating: "syncengine ", count: 91).utf8.prefix(1000)))
    static let versionError = TransportError(.unsupportedVersion, "no common wire version: ours 1...1, peer 2...3")

    /// The golden files with the frames they hold (sealed ones are built separately).
    static func plainGoldens() throws -> [(name: String, frame: Frame, compress: Bool)] {
        [
            ("envelope-uncompressed.bin", helloWatch, false),
            ("envelope-compressed.bin", repetitive, true),
            ("transport-hello.bin", TransportMessage.Hello(versions: 1...1, nonce: dialerNonce).frame, false),
            ("transport-challenge.bin",
             TransportMessage.Challenge(version: 1, nonce: listenerNonce, proof: transcript.proof(by: .listener)).frame, false),
            ("transport-proof.bin", TransportMessage.Proof(proof: transcript.proof(by: .dialer)).frame, false),
            ("transport-error.bin", TransportMessage.ErrorMessage(versionError).frame, false),
            ("transport-pairing-hello.bin",
             TransportMessage.PairingHello(versions: 1...1, pairingID: secret.id, nonce: dialerNonce).frame, false),
        ]
    }

    static func sealedGolden() throws -> [UInt8] {
        let keys = transcript.keys(for: .dialer)
        var sealer = FrameSealer(key: keys.outbound, version: 1, codec: FrameCodec())
        return try FrameCodec().encodeEnvelope(sealer.seal(helloWatch))
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["SYNCTRANSPORT_WRITE_GOLDENS"] == "1"))
    func writeGoldens() throws {
        try FileManager.default.createDirectory(atPath: Self.folder, withIntermediateDirectories: true)
        func writeNew(_ name: String, _ bytes: [UInt8]) throws {
            let path = Self.folder + "/" + name
            guard !FileManager.default.fileExists(atPath: path) else { return }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
        }
        for golden in try Self.plainGoldens() {
            try writeNew(golden.name, FrameCodec().encode(golden.frame, allowCompression: golden.compress))
        }
        try writeNew("transport-sealed-frame.bin", Self.sealedGolden())
    }

    func read(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: Self.folder + "/" + name)))
    }

    @Test func everyGoldenFrameStillDecodes() throws {
        let codec = FrameCodec()
        for golden in try Self.plainGoldens() {
            let bytes = try read(golden.name)
            #expect(Array(bytes.prefix(3)) == [0x53, 0x59, 1], "\(golden.name)")
            #expect(try codec.decode(bytes) == golden.frame, "\(golden.name)")
            let envelope = try codec.decodeEnvelope(bytes)
            #expect(envelope.flags == (golden.compress ? .compressed : []), "\(golden.name)")
            if !golden.compress {
                // Uncompressed encodings are byte-exact forever.
                #expect(try codec.encode(golden.frame, allowCompression: false) == bytes, "\(golden.name)")
            }
        }
    }

    @Test func goldenHandshakeContentsAreUnderstood() throws {
        let codec = FrameCodec()
        let hello = try TransportMessage.Hello(codec.decode(read("transport-hello.bin")))
        #expect(hello.versions == 1...1 && hello.nonce == Self.dialerNonce)
        let challenge = try TransportMessage.Challenge(codec.decode(read("transport-challenge.bin")))
        #expect(challenge.version == 1 && challenge.nonce == Self.listenerNonce)
        #expect(Self.transcript.isValid(challenge.proof, by: .listener), "the proof algorithm never changes")
        let proof = try TransportMessage.Proof(codec.decode(read("transport-proof.bin")))
        #expect(Self.transcript.isValid(proof.proof, by: .dialer))
        #expect(!Self.transcript.isValid(proof.proof, by: .listener), "role labels separate the proofs")
        let error = try TransportMessage.ErrorMessage(codec.decode(read("transport-error.bin")))
        #expect(error.code == "unsupported-version")
        #expect(error.message == "no common wire version: ours 1...1, peer 2...3")
        // Replaying the golden handshake against the pure listener: a fresh nonce defeats it.
        var listener = ListenerHandshake(secret: Self.secret)
        _ = listener.receive(try codec.decode(read("transport-hello.bin")))
        guard case .fail(let failure, _) = listener.receive(try codec.decode(read("transport-proof.bin"))) else {
            Issue.record("a replayed golden proof must fail")
            return
        }
        #expect(failure.code == .authenticationFailed)
    }

    /// The hello that names its pairing (`0xF5`): 50 bytes, the id is
    /// `PairingSecret.id` of the test secret, and a listener holding that
    /// pairing among others answers it with that secret.
    @Test func goldenPairingHelloNamesThePairing() throws {
        let codec = FrameCodec()
        let bytes = try read("transport-pairing-hello.bin")
        #expect(bytes.count == FrameEnvelope.headerSize + 50)
        let frame = try codec.decode(bytes)
        #expect(frame.type == 0xF5)
        let hello = try TransportMessage.PairingHello(frame)
        #expect(hello.versions == 1...1 && hello.nonce == Self.dialerNonce)
        #expect(hello.pairingID == Self.secret.id, "the pairing id derivation never changes")
        #expect(hex(hello.pairingID) == "91ecfa3d710ba82d508d450b9dbd01e6")
        var listener = ListenerHandshake(
            secret: PairingSecret.generate(), additionalSecrets: [Self.secret], nonce: Self.listenerNonce)
        guard case .send(let reply) = listener.receive(frame) else {
            Issue.record("a listener holding the golden pairing answers its hello with a challenge")
            return
        }
        let challenge = try TransportMessage.Challenge(reply)
        #expect(Self.transcript.isValid(challenge.proof, by: .listener), "answered with the named pairing's secret")
    }

    @Test func goldenSealedFrameOpensWithTheDerivedKey() throws {
        let bytes = try read("transport-sealed-frame.bin")
        #expect(bytes == (try Self.sealedGolden()), "key derivation and sealing are byte-exact forever")
        let envelope = try FrameCodec().decodeEnvelope(bytes)
        #expect(envelope.flags == .encrypted)
        #expect(envelope.payload.count == Self.helloWatch.payload.count + 16)
        let keys = Self.transcript.keys(for: .listener)
        var opener = FrameOpener(key: keys.inbound, version: 1, codec: FrameCodec())
        #expect(try opener.open(envelope) == Self.helloWatch)
        expectCode(.protocolViolation) { _ = try FrameCodec().decode(bytes) }
    }
}

import Crypto
import Foundation
import NIOCore
import NIOEmbedded
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// Fuzzes the decoders production runs (`FrameDecoderFuzzTests` covers the
/// test-only `FrameDecoder`): `EnvelopeDecoderHandler` in a
/// `ByteToMessageHandler` on an `EmbeddedChannel`, with the handshake limits
/// on, followed by the handshake's receive path; and `FrameOpener`, the
/// encrypted path. Inputs may only be accepted or refused with a
/// `TransportError`; a trap fails the whole run. The seed is printed: rerun
/// with `FUZZ_SEED=<seed>`.
@Suite struct EnvelopeDecoderFuzzTests {
    /// Inputs (mutated frames) through the handler and through the opener:
    /// 100,000 in all, split so that both halves take a few seconds in a debug
    /// build (they run in parallel).
    static let handlerIterations = 50_000
    static let openerIterations = 50_000

    static func seed() -> UInt64 {
        ProcessInfo.processInfo.environment["FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
    }

    static let limits = FrameLimits(maxFrameSize: 64 << 10, maxInflatedSize: 128 << 10)

    /// Valid byte streams: handshake frames, engine frames, a sealed frame.
    static func corpus() throws -> [[UInt8]] {
        let codec = FrameCodec(limits: limits)
        let plain = FrameCodec(limits: limits, compressionLevel: 0)
        var sealer = FrameSealer(key: SymmetricKey(size: .bits256), version: 1, codec: codec)
        return try [
            plain.encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame, allowCompression: false),
            plain.encode(TransportMessage.Challenge(version: 1, nonce: makeNonce(), proof: makeNonce()).frame, allowCompression: false),
            plain.encode(TransportMessage.Proof(proof: makeNonce()).frame, allowCompression: false),
            plain.encode(TransportMessage.ErrorMessage(TransportError(.timeout, "too slow")).frame, allowCompression: false),
            codec.encode(Frame(type: 2, payload: Array("hello watch".utf8))),
            codec.encode(Frame(type: 3, payload: [UInt8](repeating: 0x61, count: 2_000))),
            codec.encodeEnvelope(sealer.seal(Frame(type: 4, payload: Array(String(repeating: "key=value;", count: 80).utf8)))),
            plain.encode(TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame, allowCompression: false)
                + plain.encode(TransportMessage.Proof(proof: makeNonce()).frame, allowCompression: false),
        ]
    }

    /// Runs `input`, cut into `cuts` pieces, through a fresh handler; then
    /// the first `handshakeFrames` envelopes through the handshake receive path.
    /// Returns "accepted" or the refusal's code; "other-error" for anything
    /// that is not a `TransportError`.
    static func decode(_ input: [UInt8], cuts: [Int], handshakeFrames: Int) -> (outcome: String, envelopes: Int) {
        let channel = EmbeddedChannel(
            handler: ByteToMessageHandler(
                EnvelopeDecoderHandler(limits: limits, handshakeFrames: handshakeFrames, activity: SocketActivity())))
        var envelopes = 0
        do {
            let codec = FrameCodec(limits: limits)
            func drain() throws {
                while let envelope = try channel.readInbound(as: Envelope.self) {
                    envelopes += 1
                    guard envelopes <= handshakeFrames else { continue }
                    let frame = try codec.openHandshakeEnvelope(envelope)
                    switch frame.type {
                    case TransportFrameType.hello: _ = try TransportMessage.Hello(frame)
                    case TransportFrameType.challenge: _ = try TransportMessage.Challenge(frame)
                    case TransportFrameType.proof: _ = try TransportMessage.Proof(frame)
                    default: _ = try TransportMessage.ErrorMessage(frame)
                    }
                }
            }
            var start = 0
            for cut in cuts + [input.count] where cut >= start {
                try channel.writeInbound(ByteBuffer(bytes: input[start..<cut]))
                try drain()
                start = cut
            }
            // The end of the stream: a frame cut short is refused here.
            _ = try channel.finish()
            return ("accepted", envelopes)
        } catch let error as TransportError {
            _ = try? channel.finish(acceptAlreadyClosed: true)
            return (error.code.rawValue, envelopes)
        } catch {
            _ = try? channel.finish(acceptAlreadyClosed: true)
            return ("other-error \(error)", envelopes)
        }
    }

    @Test func failCasesThroughTheProductionDecoder() throws {
        var inputs = FrameDecoderFuzzTests.regressionCases
        let folder = URL(fileURLWithPath: fixturesPath("wire/fail-cases"))
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".bin") {
            inputs.append(Array(try Data(contentsOf: folder.appendingPathComponent(file))))
        }
        for input in inputs {
            for handshakeFrames in 0...2 {
                let (outcome, _) = Self.decode(input, cuts: [input.count / 2], handshakeFrames: handshakeFrames)
                #expect(!outcome.hasPrefix("other-error"), "\(input): \(outcome)")
            }
        }
    }

    @Test func mutatedStreamsThroughTheEnvelopeDecoderHandler() async throws {
        let seed = Self.seed()
        print("EnvelopeDecoderHandler fuzz seed: \(seed) (rerun with FUZZ_SEED=\(seed))")
        var random = SeededRandom(seed: seed)
        let corpus = try Self.corpus()
        var outcomes: [String: Int] = [:]
        var envelopes = 0
        var fed = 0
        var streams = 0
        // Each stream is one connection: 1 to 6 frames, each mutated or left
        // whole (so later frames are reached, past the handshake limits), cut
        // into random reads. Every frame fed counts as one input.
        while fed < Self.handlerIterations {
            if streams % 64 == 0 { await Task.yield() }
            let count = min(1 + Int(random.next(below: 6)), Self.handlerIterations - fed)
            var stream: [UInt8] = []
            for _ in 0..<count {
                var input = corpus[Int(random.next(below: UInt64(corpus.count)))]
                for _ in 0..<Int(random.next(below: 3)) {
                    FrameDecoderFuzzTests.mutate(&input, corpus: corpus, random: &random)
                }
                stream += input
            }
            fed += count
            streams += 1
            let cuts = (0..<Int(random.next(below: 4))).map { _ in Int(random.next(below: UInt64(stream.count + 1))) }.sorted()
            let handshakeFrames = Int(random.next(below: 4)) == 0 ? 0 : 2
            let result = Self.decode(stream, cuts: cuts, handshakeFrames: handshakeFrames)
            outcomes[result.outcome, default: 0] += 1
            envelopes += result.envelopes
            if result.outcome.hasPrefix("other-error") {
                Issue.record("seed \(seed) stream \(streams): \(result.outcome) escaped for input \(stream.prefix(64))")
                return
            }
        }
        let accepted = outcomes["accepted"] ?? 0
        print("EnvelopeDecoderHandler fuzz: \(fed) frames in \(streams) streams; \(accepted) streams accepted, "
            + "\(streams - accepted) refused, \(envelopes) envelopes decoded; \(outcomes.sorted { $0.key < $1.key })")
        #expect(fed == Self.handlerIterations)
        #expect(outcomes.values.reduce(0, +) == streams)
        #expect(accepted > 0 && accepted < streams, "seed \(seed): the mutations reach both outcomes")
        #expect(outcomes["protocol-violation"] ?? 0 > 0, "seed \(seed): compressed handshake frames and bad lengths are refused")
    }

    @Test func mutatedSealedEnvelopesAreRefusedByTheOpener() async throws {
        let seed = Self.seed()
        print("FrameOpener fuzz seed: \(seed) (rerun with FUZZ_SEED=\(seed))")
        var random = SeededRandom(seed: seed)
        let key = SymmetricKey(size: .bits256)
        let codec = FrameCodec(limits: Self.limits)
        let frames = [
            Frame(type: 1, payload: []),
            Frame(type: 2, payload: Array("hello watch".utf8)),
            Frame(type: 3, payload: [UInt8](repeating: 0x61, count: 2_000)),  // compressed before sealing
            Frame(type: 4, payload: randomBytes(300, seed: seed)),
            Frame(type: TransportFrameType.heartbeat, payload: []),
            TransportMessage.ErrorMessage(TransportError(.closed, "bye")).frame,
        ]
        // Each frame sealed as a connection's first (counter 0) and second (counter 1) frame.
        var first: [Envelope] = []
        var second: [Envelope] = []
        for frame in frames {
            var sealer = FrameSealer(key: key, version: 1, codec: codec)
            first.append(try sealer.seal(frame))
            second.append(try sealer.seal(frame))
        }
        var accepted = 0
        var refused = 0
        for iteration in 0..<Self.openerIterations {
            if iteration % 256 == 0 { await Task.yield() }
            let index = Int(random.next(below: UInt64(frames.count)))
            var envelope = first[index]
            for _ in 0..<(1 + Int(random.next(below: 2))) {
                switch random.next(below: 8) {
                case 0, 1:  // flip a bit of the ciphertext or tag
                    if !envelope.payload.isEmpty {
                        let at = Int(random.next(below: UInt64(envelope.payload.count)))
                        envelope.payload[at] ^= 1 << UInt8(random.next(below: 8))
                    }
                case 2: envelope.payload = Array(envelope.payload.prefix(Int(random.next(below: UInt64(envelope.payload.count + 1)))))
                case 3: envelope.payload += randomBytes(1 + Int(random.next(below: 32)), seed: random.next())
                case 4: envelope.type = UInt8(truncatingIfNeeded: random.next())
                case 5: envelope.flags = EnvelopeFlags(rawValue: UInt8(truncatingIfNeeded: random.next()))
                case 6: envelope.version = UInt8(truncatingIfNeeded: random.next())
                default: envelope = second[Int(random.next(below: UInt64(frames.count)))]  // replayed or reordered
                }
            }
            var opener = FrameOpener(key: key, version: 1, codec: codec)
            do {
                let frame = try opener.open(envelope)
                guard envelope == first[index], frame == frames[index] else {
                    Issue.record("seed \(seed) iteration \(iteration): a mutated envelope opened: \(envelope)")
                    return
                }
                accepted += 1
            } catch let error as TransportError {
                guard error.code == .decryptionFailed else {
                    Issue.record("seed \(seed) iteration \(iteration): refused with \(error), expected decryption-failed")
                    return
                }
                refused += 1
            } catch {
                Issue.record("seed \(seed) iteration \(iteration): non-TransportError \(error)")
                return
            }
        }
        print("FrameOpener fuzz: \(accepted) accepted (mutations that undid themselves), \(refused) refused")
        #expect(accepted + refused == Self.openerIterations)
        #expect(refused > Self.openerIterations * 9 / 10)
    }
}

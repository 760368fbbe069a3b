import Foundation
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// Feeds mutated frames into `FrameDecoder`: it may only return frames or
/// throw `TransportError`; a crash fails the whole run. Inputs that once
/// crashed stay in `Fixtures/wire/fail-cases/` and `regressionCases`.
@Suite struct FrameDecoderFuzzTests {
    static let iterations = 100_000

    /// Hand-made inputs around the edges of the format, kept forever.
    static let regressionCases: [[UInt8]] = [
        [],
        [0x53],
        [0x53, 0x59],
        [0x53, 0x59, 0x01, 0xF0, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0],  // length 4 GiB
        [0x53, 0x59, 0x01, 0x01, 0x01, 0, 0, 0, 1, 0xD2, 0x02, 0xEF, 0x8D, 0x00],  // compressed, 1 garbage byte
        [0x53, 0x59, 0x01, 0x01, 0x03, 0, 0, 0, 0, 0, 0, 0, 0],  // compressed + encrypted, empty
        [0x53, 0x59, 0x01, 0x01, 0x01, 0, 0, 0, 0, 0, 0, 0, 0],  // compressed, empty payload
    ]

    @Test func regressionInputsNeverCrash() throws {
        var inputs = Self.regressionCases
        let folder = URL(fileURLWithPath: fixturesPath("wire/fail-cases"))
        let files = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        for file in files where file.hasSuffix(".bin") {
            inputs.append(Array(try Data(contentsOf: folder.appendingPathComponent(file))))
        }
        #expect(inputs.count > Self.regressionCases.count, "the FailCases corpus is read")
        for input in inputs {
            _ = decodeAll(input, splitAt: input.count / 2)
        }
    }

    @Test func mutatedFramesOnlyEverThrowTransportErrors() async throws {
        let seed = ProcessInfo.processInfo.environment["FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        print("FrameDecoder fuzz seed: \(seed) (rerun with FUZZ_SEED=\(seed))")
        var random = SeededRandom(seed: seed)
        let codec = FrameCodec(limits: FrameLimits(maxFrameSize: 64 << 10, maxInflatedSize: 128 << 10))
        let corpus: [[UInt8]] = try [
            codec.encode(Frame(type: 1, payload: [])),
            codec.encode(Frame(type: 2, payload: Array("hello watch".utf8))),
            codec.encode(Frame(type: 3, payload: [UInt8](repeating: 0x61, count: 2_000))),
            codec.encode(Frame(type: 0xF3, payload: randomBytes(300, seed: 9))),
            codec.encode(Frame(type: 4, payload: Array(String(repeating: "key=value;", count: 80).utf8))),
        ]
        var counts: [String: Int] = [:]
        for iteration in 0..<Self.iterations {
            // Long CPU-bound loop: let the cooperative pool breathe (socket tests run beside it).
            if iteration % 256 == 0 { await Task.yield() }
            var input = corpus[Int(random.next(below: UInt64(corpus.count)))]
            let mutations = 1 + Int(random.next(below: 3))
            for _ in 0..<mutations {
                Self.mutate(&input, corpus: corpus, random: &random)
            }
            let split = Int(random.next(below: UInt64(input.count + 1)))
            let outcome = decodeAll(input, splitAt: split, codec: codec)
            counts[outcome, default: 0] += 1
            if outcome == "other-error" {
                Issue.record("seed \(seed) iteration \(iteration): a non-TransportError escaped")
                return
            }
        }
        print("FrameDecoder fuzz outcomes: \(counts.sorted { $0.key < $1.key })")
        #expect(counts.values.reduce(0, +) == Self.iterations)
    }

    /// One random mutation (shared with `EnvelopeDecoderFuzzTests`).
    static func mutate(_ input: inout [UInt8], corpus: [[UInt8]], random: inout SeededRandom) {
        guard !input.isEmpty else {
            input = [UInt8(truncatingIfNeeded: random.next())]
            return
        }
        switch random.next(below: 7) {
        case 0:  // flip a bit
            let index = Int(random.next(below: UInt64(input.count)))
            input[index] ^= 1 << UInt8(random.next(below: 8))
        case 1:  // truncate
            input = Array(input.prefix(Int(random.next(below: UInt64(input.count)))))
        case 2:  // splice with another frame
            let other = corpus[Int(random.next(below: UInt64(corpus.count)))]
            let cut = Int(random.next(below: UInt64(input.count)))
            let from = Int(random.next(below: UInt64(other.count)))
            input = Array(input[..<cut]) + Array(other[from...])
        case 3:  // rewrite the length field
            if input.count >= 9 {
                let lengths: [UInt32] = [0, 1, 12, UInt32(input.count), UInt32(max(0, input.count - 13)), 65_535, 1 << 20, .max,
                                         UInt32(truncatingIfNeeded: random.next())]
                let length = lengths[Int(random.next(below: UInt64(lengths.count)))]
                input.replaceSubrange(5..<9, with: [UInt8(length >> 24), UInt8(length >> 16 & 0xFF),
                                                    UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)])
            }
        case 4:  // set flags, then fix the checksum so the payload is reached
            if input.count >= 13 {
                input[4] = UInt8(random.next(below: 8))
                let crc = Checksum.crc32(Array(input[13...]))
                input.replaceSubrange(9..<13, with: [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF),
                                                     UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)])
            }
        case 5:  // random payload bytes with a correct checksum (deep zlib paths)
            if input.count > 14 {
                let index = 13 + Int(random.next(below: UInt64(input.count - 13)))
                input[index] = UInt8(truncatingIfNeeded: random.next())
                let crc = Checksum.crc32(Array(input[13...]))
                input.replaceSubrange(9..<13, with: [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF),
                                                     UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)])
            }
        default:  // duplicate the stream
            input += input
        }
    }

    /// Decodes everything; returns the outcome's name.
    private func decodeAll(_ input: [UInt8], splitAt split: Int, codec: FrameCodec = FrameCodec()) -> String {
        var decoder = FrameDecoder(limits: codec.limits)
        do {
            decoder.append(Array(input[..<split]))
            while try decoder.next() != nil {}
            decoder.append(Array(input[split...]))
            while try decoder.next() != nil {}
            try decoder.finish()
            return "ok"
        } catch let error as TransportError {
            return error.code.rawValue
        } catch {
            return "other-error"
        }
    }
}

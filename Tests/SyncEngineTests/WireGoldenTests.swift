import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of every engine message in wire format v1, in
/// `Fixtures/wire/v1/engine-*.bin`. They are decoded by every future build.
/// Regenerate (only when adding a message) with `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGolden`.
@Suite struct WireGoldenTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/wire/v1")

    static let v = HLCTimestamp(physicalMilliseconds: 1_763_800_000_000, counter: 3, node: 0x1001)
    static let base = HLCTimestamp(physicalMilliseconds: 1_763_799_000_000, counter: 0, node: 0x2002)

    static let messages: [(String, SyncMessage)] = [
        ("engine-hello", .hello(.init(protocolRange: 1...1, node: 0x1001, role: .phone, isReply: false, pairingEpoch: "0123456789abcdef",
                                      registryFingerprint: Array(repeating: 0xAB, count: 32),
                                      declarations: ["health:daily:steps|all|automaticSmall|json|single|lww"],
                                      partialTransfers: [PartialTransfer(key: "photo", version: v, received: 2)]))),
        ("engine-batch", .batch(.init(id: 7, entries: [
            WireEntry(key: "health:daily:steps", version: v, base: base, deleted: false, encoding: "json", value: Array("1234".utf8)),
            WireEntry(key: "profile:name", version: v, base: .zero, deleted: true, encoding: "json", value: nil),
        ]))),
        ("engine-batch-compressed", .batch(.init(id: 8, entries: (0..<40).map {
            WireEntry(key: "steps:day:\($0)", version: v, base: base, deleted: false, encoding: "json",
                      value: Array("{\"id\":\($0),\"note\":\"steps heart rate sleep stand move exercise\"}".utf8))
        }))),
        ("engine-ack", .ack(.init(batchID: 7, applied: 1, rejected: [.init(key: "x", code: "unknown-key")]))),
        ("engine-chunk", .chunk(.init(entry: WireEntry(key: "photo", version: v, base: base, deleted: false, encoding: "data", value: []),
                                      totalSize: 10, totalChecksum: Checksum.crc32(Array(0..<10)), index: 0, count: 2,
                                      checksum: Checksum.crc32(Array(0..<5)), bytes: Array(0..<5)))),
        ("engine-chunk-ack", .chunkAck(.init(key: "photo", version: v, index: 0, complete: false))),
        ("engine-error", .error(.init(code: "handshake-failed", message: "a phone pairs only with a watch, but the peer is also a phone"))),
        ("engine-rebaseline", .rebaseline(.init(id: 300, purgedThrough: v.packed))),
        ("engine-caught-up", .caughtUp(.init(id: 301))),
        ("engine-manual-request", .manualRequest(.init(id: 302))),
        ("engine-manual-reply", .manualReply(.init(id: 302, accepted: true, released: 12, replyID: 40))),
    ]

    @Test func goldenFramesDecode() throws {
        let codec = FrameCodec()
        let write = ProcessInfo.processInfo.environment["SYNCENGINE_WRITE_GOLDEN"] == "1"
        for (name, message) in WireGoldenTests.messages {
            let url = WireGoldenTests.folder.appendingPathComponent(name + ".bin")
            if write {
                try FileManager.default.createDirectory(at: WireGoldenTests.folder, withIntermediateDirectories: true)
                try Data(codec.encode(message.frame())).write(to: url)
            }
            let bytes = try [UInt8](Data(contentsOf: url))
            let decoded = try SyncMessage(frame: codec.decode(bytes))
            #expect(decoded == message, "\(name)")
            #expect(bytes[0] == 0x53 && bytes[1] == 0x59 && bytes[2] == 1, "\(name): magic and version")
            if name == "engine-batch-compressed" { #expect(bytes[4] & 1 == 1, "compressed flag") }
            if name == "engine-batch" { #expect(bytes[4] & 1 == 0, "small frames stay uncompressed") }
        }
    }

    @Test func everyMessageRoundTrips() throws {
        for (_, message) in WireGoldenTests.messages {
            #expect(try SyncMessage(frame: message.frame()) == message)
        }
    }

    @Test func truncatedOrTrailingPayloadsAreRejected() throws {
        for (name, message) in WireGoldenTests.messages {
            let frame = message.frame()
            for cut in stride(from: 0, to: frame.payload.count, by: max(1, frame.payload.count / 17)) {
                #expect(throws: SyncError.self, "\(name) cut at \(cut)") {
                    _ = try SyncMessage(frame: Frame(type: frame.type, payload: Array(frame.payload.prefix(cut))))
                }
            }
            #expect(throws: SyncError.self) { _ = try SyncMessage(frame: Frame(type: frame.type, payload: frame.payload + [0])) }
        }
        #expect(throws: SyncError.self) { _ = try SyncMessage(frame: Frame(type: 0x77, payload: [1])) }
    }

    /// A re-baseline notice's version must be a real one: 0 or negative is a
    /// clear `malformedMessage`.
    @Test func rebaselineNoticeWithAVersionOutOfRangeIsRejected() throws {
        #expect(SyncMessage.MessageType.rebaseline.rawValue == 7)
        for purged in [Int64(0), -1, Int64.min] {
            let frame = SyncMessage.rebaseline(.init(id: 1, purgedThrough: purged)).frame()
            #expect(throws: SyncError.self) { _ = try SyncMessage(frame: frame) }
            do {
                _ = try SyncMessage(frame: frame)
            } catch let error as SyncError {
                #expect(error.code == .malformedMessage)
            }
        }
    }

    /// Seeded mutation fuzzing of the message decoder and of a live session:
    /// only `SyncError`s, never a crash, and the store is unchanged.
    @Test func mutatedMessagesNeverCrashTheSession() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SYNCENGINE_FUZZ_SEED"] ?? "") ?? 20_261_122
        print("message fuzz seed: \(seed)")
        var random = SeededRandom(seed: seed)
        let pair = try Pair()
        try await pair.watch.set(99, for: TestKeys.steps)
        let before = try pair.watch.allEntryInfo()
        // The golden messages of every protocol, each as its protocol writes it.
        let originals = WireGoldenTests.messages.map { $0.1.frame() } + WireGoldenV2Tests.messages.map { $0.1.frame(protocolVersion: 2) }
            + WireGoldenV3Tests.messages.map { $0.1.frame(protocolVersion: 3) } + WireGoldenV4Tests.messages.map { $0.1.frame(protocolVersion: 4) }
            + WireGoldenV5Tests.messages.map { $0.1.frame(protocolVersion: 5) }
        for i in 0..<20_000 {
            var frame = originals[i % originals.count]
            let flips = 1 + Int(random.next(below: 4))
            for _ in 0..<flips where !frame.payload.isEmpty {
                let at = Int(random.next(below: UInt64(frame.payload.count)))
                frame.payload[at] ^= UInt8(truncatingIfNeeded: 1 << random.next(below: 8))
            }
            if random.nextBool(probability: 0.2) { frame.payload = Array(frame.payload.prefix(Int(random.next(below: UInt64(frame.payload.count + 1))))) }
            if let message = try? SyncMessage(frame: frame) { _ = message.frame() }
            if i % 10 == 0 {
                // Into a session whose peer is a phone with another pairing: nothing may be applied.
                let endpoint = ReplicationEndpoint(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: "fuzz"))
                _ = endpoint.start(now: 0)
                _ = endpoint.receive(frame, now: 0)
            }
        }
        #expect(try pair.watch.allEntryInfo() == before)
    }
}

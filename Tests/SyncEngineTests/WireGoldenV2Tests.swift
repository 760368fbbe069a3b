import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of session protocol 2 in `Fixtures/wire/v2/` (the envelope
/// is still format 1; only batches changed: columnar, payload schema 2).
/// Decoded by every future build. Write missing files (never change one)
/// with `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenV2Tests`.
extension WireGoldenTests {
    /// Each golden of `messages` in `folder` (written first when missing and
    /// `SYNCENGINE_WRITE_GOLDEN=1`; a file is never changed), its bytes and
    /// frame, after checking that it decodes to its message inside an
    /// envelope of format 1.
    static func goldens(_ messages: [(String, SyncMessage)], in folder: URL,
                        protocolVersion: UInt16) throws -> [(name: String, message: SyncMessage, bytes: [UInt8], frame: Frame)] {
        let codec = FrameCodec()
        if ProcessInfo.processInfo.environment["SYNCENGINE_WRITE_GOLDEN"] == "1" {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (name, message) in messages {
                let url = folder.appendingPathComponent(name + ".bin")
                if !FileManager.default.fileExists(atPath: url.path) {
                    try Data(codec.encode(message.frame(protocolVersion: protocolVersion))).write(to: url)
                }
            }
        }
        return try messages.map { name, message in
            let bytes = try [UInt8](Data(contentsOf: folder.appendingPathComponent(name + ".bin")))
            let frame = try codec.decode(bytes)
            #expect(try SyncMessage(frame: frame) == message, "\(name)")
            #expect(bytes[0] == 0x53 && bytes[1] == 0x59 && bytes[2] == 1, "\(name): magic and envelope format 1")
            return (name, message, bytes, frame)
        }
    }
}

@Suite struct WireGoldenV2Tests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("v2")
    static let v = WireGoldenTests.v
    static let base = WireGoldenTests.base

    static let messages: [(String, SyncMessage)] = [
        ("engine-hello", .hello(.init(protocolRange: 1...2, node: 0x1001, role: .phone, isReply: false, pairingEpoch: "0123456789abcdef",
                                      registryFingerprint: Array(repeating: 0xAB, count: 32),
                                      declarations: ["health:daily:steps|all|automaticSmall|json|single|lww"], partialTransfers: []))),
        // The v1 golden's entries, as columns.
        ("engine-batch", .batch(.init(id: 7, entries: [
            WireEntry(key: "health:daily:steps", version: v, base: base, deleted: false, encoding: "json", value: Array("1234".utf8)),
            WireEntry(key: "profile:name", version: v, base: .zero, deleted: true, encoding: "json", value: nil),
        ]))),
        // Shared prefixes, each kind of base, two nodes, two encodings, a delete.
        ("engine-batch-columns", .batch(.init(id: 9, entries: [
            WireEntry(key: "steps:day:1", version: v, base: .zero, deleted: false, encoding: "json", value: Array("10".utf8)),
            WireEntry(key: "steps:day:2", version: HLCTimestamp(packed: v.packed + 1, node: 0x1001), base: base, deleted: false,
                      encoding: "json", value: Array("20".utf8)),
            WireEntry(key: "steps:week", version: HLCTimestamp(packed: v.packed + 2, node: 0x2002),
                      base: HLCTimestamp(packed: v.packed + 2, node: 0x2002), deleted: false, encoding: "data", value: [0xFF]),
            WireEntry(key: "steps:day:3", version: HLCTimestamp(packed: v.packed - 1, node: 0x1001),
                      base: HLCTimestamp(packed: base.packed + 5, node: 0x1001), deleted: true, encoding: "json", value: nil),
        ]))),
        // The v1 compressed golden's 40 entries, as columns (deflated).
        ("engine-batch-compressed", .batch(.init(id: 8, entries: (0..<40).map {
            WireEntry(key: "steps:day:\($0)", version: v, base: base, deleted: false, encoding: "json",
                      value: Array("{\"id\":\($0),\"note\":\"steps heart rate sleep stand move exercise\"}".utf8))
        }))),
    ]

    @Test func goldenFramesDecode() throws {
        for (name, message, bytes, frame) in try WireGoldenTests.goldens(Self.messages, in: Self.folder, protocolVersion: 2) {
            if case .batch = message {
                #expect(frame.payload.first == ColumnarBatch.payloadSchema, "\(name): payload schema 2")
                // Byte-exact: this build writes the same bytes (the README walks through them).
                #expect(message.frame(protocolVersion: 2) == frame, "\(name)")
            } else {
                #expect(frame.payload.first == SyncMessage.payloadSchema, "\(name): payload schema 1")
            }
            if name == "engine-batch-compressed" { #expect(bytes[4] & 1 == 1, "compressed flag") }
            if name == "engine-batch" { #expect(bytes[4] & 1 == 0, "small frames stay uncompressed") }
        }
        // The columns are smaller than the rows of the same entries (v1 goldens).
        for name in ["engine-batch", "engine-batch-compressed"] {
            let v1 = try Data(contentsOf: WireGoldenTests.folder.appendingPathComponent(name + ".bin")).count
            let v2 = try Data(contentsOf: Self.folder.appendingPathComponent(name + ".bin")).count
            #expect(v2 < v1, "\(name): protocol 2 \(v2) bytes, protocol 1 \(v1)")
        }
    }
}

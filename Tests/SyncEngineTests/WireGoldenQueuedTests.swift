import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of the queued messages (the mailbox's payloads, frame types
/// `0x11…0x15`) in `Fixtures/wire/queued/`: decoded by every future build,
/// written byte for byte by this one. Write missing files (never change one)
/// with `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenQueuedTests`.
@Suite struct WireGoldenQueuedTests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("queued")
    static let v = WireGoldenTests.v
    static let base = WireGoldenTests.base
    static let declarations = ["health:daily:steps|all|automaticSmall|json|single|lww"]

    static func header(_ role: DeviceRole = .phone, fingerprint: [UInt8] = Array(repeating: 0xAB, count: 32)) -> QueuedHeader {
        QueuedHeader(protocolVersion: 1, node: role == .phone ? 0x1001 : 0x2002, role: role, pairingEpoch: "0123456789abcdef",
                     registryFingerprint: fingerprint)
    }

    static let messages: [(String, QueuedMessage)] = [
        // The v1 golden batch's entries, covering the sender's stream after 40 through 47.
        ("queued-batch", .batch(header(), after: 40, through: 47, entries: [
            WireEntry(key: "health:daily:steps", version: v, base: base, deleted: false, encoding: "json", value: Array("1234".utf8)),
            WireEntry(key: "profile:name", version: v, base: .zero, deleted: true, encoding: "json", value: nil),
        ])),
        ("queued-ack", .ack(header(.watch), after: 40, through: 47, applied: 1,
                            rejected: [SyncMessage.Rejection(key: "profile:name", code: "unknown-key")])),
        ("queued-refusal", .refusal(header(.watch), code: "key-declaration-mismatch", message: "another key registry")),
        ("queued-rebaseline", .rebaseline(header(), purgedThrough: v.packed)),
        ("queued-declarations", .declarations(header(.watch, fingerprint: KeyRegistry.fingerprint(of: declarations)), declarations, isAnswer: false)),
        ("queued-caught-up-follows", .caughtUpFollows(header())),
        ("queued-caught-up", .caughtUp(header())),
        ("queued-renews-node-id", .renewsNodeID(header(.watch))),
    ]

    @Test func goldenFramesDecodeAndThisBuildWritesThemByteForByte() throws {
        let codec = FrameCodec()
        if ProcessInfo.processInfo.environment["SYNCENGINE_WRITE_GOLDEN"] == "1" {
            try FileManager.default.createDirectory(at: Self.folder, withIntermediateDirectories: true)
            for (name, message) in Self.messages {
                let url = Self.folder.appendingPathComponent(name + ".bin")
                if !FileManager.default.fileExists(atPath: url.path) { try Data(codec.encode(message.frame())).write(to: url) }
            }
        }
        for (name, message) in Self.messages {
            let bytes = try [UInt8](Data(contentsOf: Self.folder.appendingPathComponent(name + ".bin")))
            #expect(bytes[0] == 0x53 && bytes[1] == 0x59 && bytes[2] == 1, "\(name): magic and envelope format 1")
            let frame = try codec.decode(bytes)
            #expect(try QueuedMessage(frame: frame) == message, "\(name)")
            #expect(message.frame() == frame, "\(name)")
            #expect(frame.payload.first == QueuedMessage.payloadSchema, "\(name): payload schema 1")
        }
        // The queued batch carries its entries as a schema-1 batch does (`v1/engine-batch.bin`).
        let v1 = try FrameCodec().decode([UInt8](Data(contentsOf: WireGoldenTests.folder.appendingPathComponent("engine-batch.bin"))))
        let queued = try FrameCodec().decode([UInt8](Data(contentsOf: Self.folder.appendingPathComponent("queued-batch.bin"))))
        #expect(Array(queued.payload.suffix(v1.payload.count - 2)) == Array(v1.payload.dropFirst(2)))
    }
}

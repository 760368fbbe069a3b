import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of session protocol 3 in `Fixtures/wire/v3/`: a batch and a
/// chunk that name the stretch of the sender's stream they complete (payload
/// schema 3 wrapping schema 2 or 1), and the receipt (type `0x0B`, schema 1).
/// Decoded by every future build. Write missing files (never change one)
/// with `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenV3Tests`.
@Suite struct WireGoldenV3Tests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("v3")
    static let v = WireGoldenTests.v
    static let base = WireGoldenTests.base

    static let messages: [(String, SyncMessage)] = [
        // The v2 golden batch's entries, completing the stream from 40 through 47.
        ("engine-batch-ranged", .batch(.init(id: 7, entries: [
            WireEntry(key: "health:daily:steps", version: v, base: base, deleted: false, encoding: "json", value: Array("1234".utf8)),
            WireEntry(key: "profile:name", version: v, base: .zero, deleted: true, encoding: "json", value: nil),
        ], range: .init(lower: 40, upper: 47, anchor: v.packed)))),
        // Chunk 1 of 3 of a large value that completes the stream from 47 through 300.
        ("engine-chunk-ranged", .chunk(.init(entry: WireEntry(key: "media:photo", version: v, base: .zero, deleted: false, encoding: "data", value: []),
                                             totalSize: 10, totalChecksum: 0xCAFE_F00D, index: 1, count: 3, checksum: 0x1234_5678,
                                             bytes: [1, 2, 3, 4], range: .init(lower: 47, upper: 300, anchor: v.packed + 1)))),
        ("engine-receipt", .receipt(.init(id: 1, receivedThrough: 1_234, receivedAnchor: v.packed, acknowledgedThrough: 56,
                                           acknowledgedAnchor: base.packed))),
    ]

    @Test func goldenFramesDecode() throws {
        for (name, message, _, frame) in try WireGoldenTests.goldens(Self.messages, in: Self.folder, protocolVersion: 3) {
            // Byte-exact: this build writes the same bytes (the README walks through them).
            #expect(message.frame(protocolVersion: 3) == frame, "\(name)")
            if case .receipt = message {
                #expect(frame.payload.first == SyncMessage.payloadSchema, "\(name): payload schema 1")
            } else {
                #expect(frame.payload.first == SyncMessage.rangedPayloadSchema, "\(name): payload schema 3")
            }
        }
        // A ranged batch is the v2 golden batch's payload behind the range: twelve bytes more.
        let v2 = try FrameCodec().decode([UInt8](Data(contentsOf: WireGoldenV2Tests.folder.appendingPathComponent("engine-batch.bin"))))
        let v3 = try FrameCodec().decode([UInt8](Data(contentsOf: Self.folder.appendingPathComponent("engine-batch-ranged.bin"))))
        #expect(Array(v3.payload.dropFirst(12)) == v2.payload)
        // Below protocol 3 the range is left out: the same bytes as before.
        #expect(Self.messages[0].1.frame(protocolVersion: 2) == v2)
    }

    /// Ranges that cannot be: empty, reversed, past `Int64`, on a message
    /// that takes none, nested; and receipts out of range: all refused as malformed.
    @Test func malformedRangesAndReceiptsAreRefused() throws {
        func ranged(type: SyncMessage.MessageType, lower: UInt64, upper: UInt64, anchor: UInt64 = 1, inner: [UInt8]) -> Frame {
            var w = ByteWriter()
            w.writeUInt8(SyncMessage.rangedPayloadSchema)
            w.writeVarInt(lower)
            w.writeVarInt(upper)
            w.writeVarInt(anchor)
            w.writeRaw(inner)
            return Frame(type: type.rawValue, payload: w.bytes)
        }
        let batch = SyncMessage.batch(.init(id: 1, entries: [])).frame(protocolVersion: 2).payload
        let caughtUp = SyncMessage.caughtUp(.init(id: 3)).frame().payload
        let cases: [(String, Frame)] = [
            ("empty range", ranged(type: .batch, lower: 5, upper: 5, inner: batch)),
            ("reversed range", ranged(type: .batch, lower: 9, upper: 5, inner: batch)),
            ("past Int64", ranged(type: .batch, lower: 0, upper: UInt64(Int64.max) + 1, inner: batch)),
            ("an anchor past Int64", ranged(type: .batch, lower: 0, upper: 5, anchor: UInt64.max, inner: batch)),
            ("a caught-up notice with a range", ranged(type: .caughtUp, lower: 0, upper: 5, inner: caughtUp)),
            ("nested", ranged(type: .batch, lower: 0, upper: 5, inner: ranged(type: .batch, lower: 0, upper: 5, inner: batch).payload)),
            ("nothing inside", ranged(type: .batch, lower: 0, upper: 5, inner: [])),
            ("a batch wrapping a caught-up payload", ranged(type: .batch, lower: 0, upper: 5, inner: caughtUp)),
        ]
        for (what, frame) in cases {
            #expect(throws: SyncError.self, "\(what)") { _ = try SyncMessage(frame: frame) }
            do { _ = try SyncMessage(frame: frame) } catch let error as SyncError { #expect(error.code == .malformedMessage, "\(what)") }
        }
        var w = ByteWriter()
        w.writeUInt8(SyncMessage.payloadSchema)
        w.writeVarInt(1)
        for field in [UInt64.max, 0, 0, 0] { w.writeVarInt(field) }
        #expect(throws: SyncError.self) { _ = try SyncMessage(frame: Frame(type: SyncMessage.MessageType.receipt.rawValue, payload: w.bytes)) }
    }
}

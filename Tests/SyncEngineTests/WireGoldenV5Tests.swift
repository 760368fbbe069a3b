import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of session protocol 5 in `Fixtures/wire/v5/`: a chunk
/// acknowledgement that names the value its chunk belongs to and how many of
/// that value's chunks are staged (payload schema 5). Decoded by every future
/// build. Write missing files (never change one) with
/// `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenV5Tests`.
@Suite struct WireGoldenV5Tests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("v5")

    static let messages: [(String, SyncMessage)] = [
        ("engine-chunk-ack-value", .chunkAck(.init(key: "photo", version: WireGoldenTests.v, index: 0, complete: false,
                                                   value: .init(totalSize: 300, totalChecksum: 0xDEAD_BEEF), staged: 1))),
    ]

    @Test func goldenFramesDecode() throws {
        for (name, message, _, frame) in try WireGoldenTests.goldens(Self.messages, in: Self.folder, protocolVersion: 5) {
            // Byte-exact: this build writes the same bytes (the README walks through them).
            #expect(message.frame(protocolVersion: 5) == frame, "\(name)")
            #expect(frame.payload.first == SyncMessage.valuePayloadSchema, "\(name): payload schema 5")
        }
        // The v1 golden acknowledgement is this one's payload without the value and the staged count, in schema 1.
        let v1 = try FrameCodec().decode([UInt8](Data(contentsOf: WireGoldenTests.folder.appendingPathComponent("engine-chunk-ack.bin"))))
        let v5 = try FrameCodec().decode([UInt8](Data(contentsOf: Self.folder.appendingPathComponent("engine-chunk-ack-value.bin"))))
        #expect(Array(v5.payload.dropFirst().prefix(v1.payload.count - 1)) == Array(v1.payload.dropFirst()))
        #expect(v5.payload.count == v1.payload.count + 2 + 4 + 1)
        // Below protocol 5 the value and the count are left out: the v1 acknowledgement's bytes.
        #expect(Self.messages[0].1.frame(protocolVersion: 4) == v1)
    }

    /// Acknowledgements that cannot be: a value of 0 bytes, a staged count
    /// past the message limit, another message type in schema 5, trailing
    /// or missing bytes: all refused as malformed.
    @Test func malformedValueAcknowledgementsAreRefused() throws {
        func ack(type: SyncMessage.MessageType = .chunkAck, size: UInt64 = 300, staged: UInt64? = 1, trailing: [UInt8] = []) -> Frame {
            var w = ByteWriter()
            w.writeUInt8(SyncMessage.valuePayloadSchema)
            w.writeString("photo")
            w.write(WireGoldenTests.v)
            w.writeVarInt(2)
            w.writeUInt8(0)
            w.writeVarInt(size)
            w.writeUInt32(7)
            if let staged { w.writeVarInt(staged) }
            w.writeRaw(trailing)
            return Frame(type: type.rawValue, payload: w.bytes)
        }
        let cases: [(String, Frame)] = [
            ("a value of 0 bytes", ack(size: 0)),
            ("a staged count past the limit", ack(staged: UInt64(SyncMessage.maxCount) + 1)),
            ("no staged count", ack(staged: nil)),
            ("a trailing byte", ack(trailing: [0])),
            ("a batch acknowledgement in schema 5", ack(type: .ack)),
            ("a chunk in schema 5", ack(type: .chunk)),
        ]
        WireGoldenTests.expectRefusedAsMalformed(cases)
        #expect(try SyncMessage(frame: ack()) == .chunkAck(.init(key: "photo", version: WireGoldenTests.v, index: 2, complete: false,
                                                                 value: .init(totalSize: 300, totalChecksum: 7), staged: 1)))
    }
}

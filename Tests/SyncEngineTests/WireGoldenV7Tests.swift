import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of session protocol 7 in `Fixtures/wire/v7/`: a chunk
/// acknowledgement that refuses its value for good and names the code
/// (payload schema 7). Decoded by every future build. Write missing files
/// (never change one) with `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenV7Tests`.
@Suite struct WireGoldenV7Tests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("v7")

    static let messages: [(String, SyncMessage)] = [
        ("engine-chunk-ack-refused", .chunkAck(.init(key: "photo", version: WireGoldenTests.v, index: 0, complete: true,
                                                     value: .init(totalSize: 300, totalChecksum: 0xDEAD_BEEF), staged: 0,
                                                     refusal: "value-too-large"))),
    ]

    @Test func goldenFramesDecode() throws {
        for (name, message, _, frame) in try WireGoldenTests.goldens(Self.messages, in: Self.folder, protocolVersion: 7) {
            // Byte-exact: this build writes the same bytes (the README walks through them).
            #expect(message.frame(protocolVersion: 7) == frame, "\(name)")
            #expect(frame.payload.first == SyncMessage.refusalPayloadSchema, "\(name): payload schema 7")
        }
        // The v5 golden acknowledgement's fields (with complete and staged as a refusal has them), then the code.
        let v7 = try FrameCodec().decode([UInt8](Data(contentsOf: Self.folder.appendingPathComponent("engine-chunk-ack-refused.bin"))))
        var v5 = Self.messages[0].1
        if case .chunkAck(var ack) = v5 {
            ack.refusal = nil
            v5 = .chunkAck(ack)
        }
        let schema5 = v5.frame(protocolVersion: 7).payload
        #expect(schema5.first == SyncMessage.valuePayloadSchema)
        #expect(Array(v7.payload.dropFirst().prefix(schema5.count - 1)) == Array(schema5.dropFirst()))
        #expect(Array(v7.payload.dropFirst(schema5.count)) == [15] + Array("value-too-large".utf8))
        // Below protocol 7 the refusal is left out: schema 5 in protocols 5 and 6, schema 1 before.
        #expect(Self.messages[0].1.frame(protocolVersion: 6) == v5.frame(protocolVersion: 6))
        #expect(Self.messages[0].1.frame(protocolVersion: 6).payload.first == SyncMessage.valuePayloadSchema)
        #expect(Self.messages[0].1.frame(protocolVersion: 4).payload.first == SyncMessage.payloadSchema)
    }

    /// Refusals that cannot be: an empty code, one that does not complete the
    /// value, a code over 128 bytes, another message type in schema 7, a
    /// missing code or trailing bytes: all refused as malformed.
    @Test func malformedRefusalsAreRefused() throws {
        func ack(type: SyncMessage.MessageType = .chunkAck, complete: UInt8 = 1, code: String? = "value-too-large", trailing: [UInt8] = []) -> Frame {
            var w = ByteWriter()
            w.writeUInt8(SyncMessage.refusalPayloadSchema)
            w.writeString("photo")
            w.write(WireGoldenTests.v)
            w.writeVarInt(2)
            w.writeUInt8(complete)
            w.writeVarInt(300)
            w.writeUInt32(7)
            w.writeVarInt(0)
            if let code { w.writeString(code) }
            w.writeRaw(trailing)
            return Frame(type: type.rawValue, payload: w.bytes)
        }
        let cases: [(String, Frame)] = [
            ("an empty code", ack(code: "")),
            ("a refusal that does not complete", ack(complete: 0)),
            ("a code over 128 bytes", ack(code: String(repeating: "x", count: 129))),
            ("no code", ack(code: nil)),
            ("a trailing byte", ack(trailing: [0])),
            ("a batch acknowledgement in schema 7", ack(type: .ack)),
            ("a chunk in schema 7", ack(type: .chunk)),
        ]
        WireGoldenTests.expectRefusedAsMalformed(cases)
        #expect(try SyncMessage(frame: ack()) == .chunkAck(.init(key: "photo", version: WireGoldenTests.v, index: 2, complete: true,
                                                                 value: .init(totalSize: 300, totalChecksum: 7), staged: 0,
                                                                 refusal: "value-too-large")))
    }
}

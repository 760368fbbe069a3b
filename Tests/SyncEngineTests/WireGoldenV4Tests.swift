import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Golden frames of session protocol 4 in `Fixtures/wire/v4/`: a re-baseline
/// notice that names the generation it starts (payload schema 4). Decoded by
/// every future build. Write missing files (never change one) with
/// `SYNCENGINE_WRITE_GOLDEN=1 swift test --filter WireGoldenV4Tests`.
@Suite struct WireGoldenV4Tests {
    static let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("v4")

    static let messages: [(String, SyncMessage)] = [
        ("engine-rebaseline-generation", .rebaseline(.init(id: 300, purgedThrough: WireGoldenTests.v.packed, generation: 5))),
    ]

    @Test func goldenFramesDecode() throws {
        for (name, message, _, frame) in try WireGoldenTests.goldens(Self.messages, in: Self.folder, protocolVersion: 4) {
            // Byte-exact: this build writes the same bytes (the README walks through them).
            #expect(message.frame(protocolVersion: 4) == frame, "\(name)")
            #expect(frame.payload.first == SyncMessage.generationPayloadSchema, "\(name): payload schema 4")
        }
        // The v1 golden notice is this one's payload without the generation, in schema 1.
        let v1 = try FrameCodec().decode([UInt8](Data(contentsOf: WireGoldenTests.folder.appendingPathComponent("engine-rebaseline.bin"))))
        let v4 = try FrameCodec().decode([UInt8](Data(contentsOf: Self.folder.appendingPathComponent("engine-rebaseline-generation.bin"))))
        #expect(Array(v4.payload.dropFirst().dropLast()) == Array(v1.payload.dropFirst()))
        // Below protocol 4 the generation is left out: the v1 notice's bytes.
        #expect(Self.messages[0].1.frame(protocolVersion: 3) == v1)
    }

    /// Notices that cannot be: generation 0 or past `Int64`, purged version 0,
    /// another message type in schema 4, trailing or missing bytes: all
    /// refused as malformed.
    @Test func malformedGenerationNoticesAreRefused() throws {
        func notice(type: SyncMessage.MessageType = .rebaseline, purged: UInt64 = 77, generation: UInt64?, trailing: [UInt8] = []) -> Frame {
            var w = ByteWriter()
            w.writeUInt8(SyncMessage.generationPayloadSchema)
            w.writeVarInt(9)
            w.writeUInt64(purged)
            if let generation { w.writeVarInt(generation) }
            w.writeRaw(trailing)
            return Frame(type: type.rawValue, payload: w.bytes)
        }
        let cases: [(String, Frame)] = [
            ("generation 0", notice(generation: 0)),
            ("a generation past Int64", notice(generation: UInt64(Int64.max) + 1)),
            ("purged through 0", notice(purged: 0, generation: 1)),
            ("no generation", notice(generation: nil)),
            ("a trailing byte", notice(generation: 1, trailing: [0])),
            ("a caught-up notice in schema 4", notice(type: .caughtUp, generation: 1)),
            ("a batch in schema 4", notice(type: .batch, generation: 1)),
        ]
        WireGoldenTests.expectRefusedAsMalformed(cases)
        #expect(try SyncMessage(frame: notice(generation: 1)) == .rebaseline(.init(id: 9, purgedThrough: 77, generation: 1)))
    }
}

extension WireGoldenTests {
    /// Each frame of `cases` is refused as `.malformedMessage` (the string says what it is).
    static func expectRefusedAsMalformed(_ cases: [(String, Frame)], sourceLocation: SourceLocation = #_sourceLocation) {
        for (what, frame) in cases {
            do {
                _ = try SyncMessage(frame: frame)
                Issue.record("\(what) was decoded", sourceLocation: sourceLocation)
            } catch let error as SyncError {
                #expect(error.code == .malformedMessage, "\(what): \(error)", sourceLocation: sourceLocation)
            } catch {
                Issue.record("\(what): \(error)", sourceLocation: sourceLocation)
            }
        }
    }
}

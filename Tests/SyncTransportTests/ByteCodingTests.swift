import Testing
@testable import SyncTransport

@Suite struct ByteCodingTests {
    @Test func roundTripsEveryKind() throws {
        var writer = ByteWriter()
        writer.writeUInt8(0xAB)
        writer.writeUInt16(0x1234)
        writer.writeUInt32(0xDEAD_BEEF)
        writer.writeUInt64(0x0102_0304_0506_0708)
        for value: UInt64 in [0, 1, 127, 128, 300, 16_383, 16_384, UInt64(UInt32.max), .max] {
            writer.writeVarInt(value)
        }
        writer.writeBytes([1, 2, 3])
        writer.writeBytes([])
        writer.writeRaw([9, 9])
        writer.writeString("héllo ⌚️")

        var reader = ByteReader(writer.bytes)
        #expect(try reader.readUInt8() == 0xAB)
        #expect(try reader.readUInt16() == 0x1234)
        #expect(try reader.readUInt32() == 0xDEAD_BEEF)
        #expect(try reader.readUInt64() == 0x0102_0304_0506_0708)
        for value: UInt64 in [0, 1, 127, 128, 300, 16_383, 16_384, UInt64(UInt32.max), .max] {
            #expect(try reader.readVarInt() == value)
        }
        #expect(try reader.readBytes(maxLength: 10) == [1, 2, 3])
        #expect(try reader.readBytes(maxLength: 0) == [])
        #expect(try reader.readRaw(count: 2) == [9, 9])
        #expect(try reader.readString(maxLength: 100) == "héllo ⌚️")
        #expect(reader.isAtEnd)
        #expect(reader.remaining == 0)
    }

    @Test func integersAreBigEndianAndVarIntsLEB128() {
        var writer = ByteWriter()
        writer.writeUInt32(0x0102_0304)
        writer.writeVarInt(300)
        #expect(writer.bytes == [1, 2, 3, 4, 0xAC, 0x02])
    }

    @Test func readsPastTheEndThrowTruncated() {
        var reader = ByteReader([1, 2, 3])
        #expect(throws: TransportError.self) { try reader.readUInt32() }
        #expect(reader.remaining == 3, "a failed read consumes nothing")
        expectCode(.truncatedFrame) { var r = ByteReader([]); _ = try r.readUInt8() }
        expectCode(.truncatedFrame) { var r = ByteReader([0x80]); _ = try r.readVarInt() }
        expectCode(.truncatedFrame) { var r = ByteReader([1]); _ = try r.readUInt64() }
        expectCode(.truncatedFrame) { var r = ByteReader([1, 2]); _ = try r.readRaw(count: 3) }
    }

    @Test func lengthPrefixesAreBoundedBeforeAllocating() {
        // A length of 2^62 with 1 byte behind it must neither allocate nor crash.
        var huge = ByteWriter()
        huge.writeVarInt(1 << 62)
        huge.writeRaw([0])
        expectCode(.oversizedFrame) { var r = ByteReader(huge.bytes); _ = try r.readBytes(maxLength: 1024) }
        expectCode(.truncatedFrame) { var r = ByteReader(huge.bytes); _ = try r.readBytes(maxLength: .max) }
        expectCode(.oversizedFrame) { var r = ByteReader(huge.bytes); _ = try r.readString(maxLength: 10) }
        var long = ByteWriter()
        long.writeString("abcdef")
        expectCode(.oversizedFrame) { var r = ByteReader(long.bytes); _ = try r.readString(maxLength: 5) }
    }

    @Test func malformedVarIntsAndUTF8AreRejected() {
        expectCode(.protocolViolation) { var r = ByteReader([UInt8](repeating: 0xFF, count: 11)); _ = try r.readVarInt() }
        expectCode(.protocolViolation) {
            var r = ByteReader([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02])
            _ = try r.readVarInt()
        }
        expectCode(.protocolViolation) { var r = ByteReader([2, 0xC3, 0x28]); _ = try r.readString(maxLength: 10) }
        expectCode(.protocolViolation) { var r = ByteReader([1]); _ = try r.readRaw(count: -1) }
    }

    @Test func randomInputNeverCrashesTheReader() {
        var random = SeededRandom(seed: 7)
        for _ in 0..<5_000 {
            let bytes = (0..<Int(random.next(below: 24))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            var reader = ByteReader(bytes)
            while !reader.isAtEnd {
                let choice = random.next(below: 5)
                do {
                    switch choice {
                    case 0: _ = try reader.readVarInt()
                    case 1: _ = try reader.readBytes(maxLength: 16)
                    case 2: _ = try reader.readString(maxLength: 16)
                    case 3: _ = try reader.readUInt32()
                    default: _ = try reader.readUInt8()
                    }
                } catch is TransportError {
                    break
                } catch {
                    Issue.record("unexpected error \(error)")
                    break
                }
            }
        }
    }
}

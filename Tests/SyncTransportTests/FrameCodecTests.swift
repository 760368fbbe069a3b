import Testing
@_spi(Benchmarks) @testable import SyncTransport

@Suite struct FrameCodecTests {
    let codec = FrameCodec()

    @Test func headerLayoutIsByteExact() throws {
        let bytes = try codec.encode(Frame(type: 0x07, payload: [0xAA, 0xBB]))
        let crc = Checksum.crc32([0xAA, 0xBB])
        #expect(bytes == [0x53, 0x59, 1, 0x07, 0, 0, 0, 0, 2,
                          UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF),
                          0xAA, 0xBB])
        #expect(FrameEnvelope.headerSize == 13)
    }

    @Test(arguments: [0, 1, 255, 256, 10_000, 1 << 20])
    func roundTripsAnySize(size: Int) throws {
        for payload in [randomBytes(size, seed: UInt64(size)), [UInt8](repeating: 0x41, count: size)] {
            let frame = Frame(type: 0x10, payload: payload)
            let bytes = try codec.encode(frame)
            #expect(try codec.decode(bytes) == frame)
            let envelope = try codec.decodeEnvelope(bytes)
            let compressible = size >= 256 && payload.first == 0x41
            #expect(envelope.flags.contains(.compressed) == compressible)
            if compressible { #expect(bytes.count < size / 4) }
            if !compressible { #expect(bytes.count == size + 13) }
        }
    }

    @Test func compressionCanBeDisabledAndThresholdRespected() throws {
        let payload = [UInt8](repeating: 1, count: 1000)
        #expect(try codec.decodeEnvelope(codec.encode(Frame(type: 1, payload: payload), allowCompression: false)).flags == [])
        let high = FrameCodec(limits: FrameLimits(compressionThreshold: 2000))
        #expect(try high.decodeEnvelope(high.encode(Frame(type: 1, payload: payload))).flags == [])
    }

    @Test func framesAreDeflatedWithTheFrameSettings() throws {
        let payload = CompressionTests.notes(count: 300)
        let envelope = try FrameCodec().decodeEnvelope(FrameCodec().encode(Frame(type: 1, payload: payload)))
        #expect(envelope.payload == (try Compression.deflate(payload, settings: .frames)))
        let level6 = FrameCodec(compressionLevel: 6)
        #expect(try level6.decodeEnvelope(level6.encode(Frame(type: 1, payload: payload))).payload
            == (try Compression.deflate(payload, level: 6)))
        // zlib's default level stays the default (it was clamped to 0, storing the payload).
        let zlibDefault = FrameCodec(compressionLevel: -1)
        #expect(try zlibDefault.decodeEnvelope(zlibDefault.encode(Frame(type: 1, payload: payload))).payload
            == (try Compression.deflate(payload, level: 6)))
        // libdeflate's levels clamp to its own 0...12.
        #expect(FrameCodec(compression: .libdeflate(level: 20)).compression == .libdeflate(level: 12))
        #expect(FrameCodec(compression: .libdeflate(level: -3)).compression == .libdeflate(level: 0))
        #expect(FrameCodec(compression: Compression.Settings(level: 12)).compression == Compression.Settings(level: 9))
    }

    @Test func encodeRefusesOversizedFramesAndUnknownVersions() {
        let small = FrameCodec(limits: FrameLimits(maxFrameSize: 100, maxInflatedSize: 1000))
        let error = expectCode(.oversizedFrame) { _ = try small.encode(Frame(type: 1, payload: randomBytes(101, seed: 3))) }
        #expect(error?.message == "frame of 101 bytes exceeds the 100-byte limit")
        // Compressible payloads may be larger than the wire limit, not than the inflated limit.
        #expect(throws: Never.self) { _ = try small.encode(Frame(type: 1, payload: [UInt8](repeating: 0, count: 1000))) }
        expectCode(.oversizedFrame) { _ = try small.encode(Frame(type: 1, payload: [UInt8](repeating: 0, count: 1001))) }
        expectCode(.unsupportedVersion) { _ = try codec.encode(Frame(type: 1, payload: []), version: 2) }
    }

    // MARK: Every error code of decoding

    func valid(_ payload: [UInt8] = Array("payload".utf8)) throws -> [UInt8] {
        try codec.encode(Frame(type: 0x21, payload: payload), allowCompression: false)
    }

    @Test func badMagic() throws {
        var bytes = try valid()
        bytes[1] = 0x58
        let error = expectCode(.badMagic) { _ = try codec.decode(bytes) }
        #expect(error?.message.contains("0x5358") == true)
        expectCode(.badMagic) { _ = try codec.decode(Array("GET / HTTP/1.1\r\n\r\n".utf8)) }
    }

    @Test func unsupportedVersion() throws {
        var bytes = try valid()
        bytes[2] = 2
        let error = expectCode(.unsupportedVersion) { _ = try codec.decode(bytes) }
        #expect(error?.message == "frame format version 2 is not supported (supported: 1...1)")
        bytes[2] = 0
        expectCode(.unsupportedVersion) { _ = try codec.decode(bytes) }
    }

    @Test func unknownFlags() throws {
        var bytes = try valid()
        bytes[4] = 0x04
        expectCode(.protocolViolation) { _ = try codec.decode(bytes) }
    }

    @Test func encryptedFrameWithoutSecureChannel() throws {
        var bytes = try valid()
        bytes[4] = EnvelopeFlags.encrypted.rawValue
        expectCode(.protocolViolation) { _ = try codec.decode(bytes) }
        #expect(try codec.decodeEnvelope(bytes).flags == .encrypted)
    }

    @Test func oversizedLengthField() throws {
        var bytes = try valid()
        bytes.replaceSubrange(5..<9, with: [0x00, 0x89, 0x54, 0x40])  // 9,000,000
        let error = expectCode(.oversizedFrame) { _ = try codec.decode(bytes) }
        #expect(error?.message == "frame of 9000000 bytes exceeds the 4194304-byte limit")
    }

    @Test func truncatedAndTrailing() throws {
        let bytes = try valid()
        expectCode(.truncatedFrame) { _ = try codec.decode(Array(bytes.prefix(5))) }
        expectCode(.truncatedFrame) { _ = try codec.decode(Array(bytes.dropLast())) }
        expectCode(.protocolViolation) { _ = try codec.decode(bytes + [0]) }
    }

    @Test func checksumMismatch() throws {
        var bytes = try valid()
        bytes[bytes.count - 1] ^= 0x01
        expectCode(.checksumMismatch) { _ = try codec.decode(bytes) }
        var header = try valid()
        header[12] ^= 0x01
        expectCode(.checksumMismatch) { _ = try codec.decode(header) }
    }

    @Test func compressedGarbageAndBombs() throws {
        let garbage = try codec.encodeEnvelope(Envelope(type: 3, flags: .compressed, payload: Array("not zlib".utf8)))
        expectCode(.decompressionFailed) { _ = try codec.decode(garbage) }
        let bomb = try Compression.deflate([UInt8](repeating: 0, count: 9 << 20), level: 9)
        let bombFrame = try codec.encodeEnvelope(Envelope(type: 3, flags: .compressed, payload: bomb))
        expectCode(.decompressionFailed) { _ = try codec.decode(bombFrame) }
    }

    // MARK: Incremental decoding

    @Test func decoderHandlesEverySplitPoint() throws {
        let frames = [
            Frame(type: 1, payload: []),
            Frame(type: 2, payload: Array("short".utf8)),
            Frame(type: 3, payload: [UInt8](repeating: 9, count: 600)),
            Frame(type: 4, payload: randomBytes(300, seed: 4)),
        ]
        let stream = try frames.flatMap { try codec.encode($0) }
        for split in 0...stream.count {
            var decoder = FrameDecoder()
            var decoded: [Frame] = []
            decoder.append(Array(stream[..<split]))
            while let frame = try decoder.next() { decoded.append(frame) }
            decoder.append(Array(stream[split...]))
            while let frame = try decoder.next() { decoded.append(frame) }
            #expect(decoded == frames, "split at \(split)")
            #expect(decoder.bufferedByteCount == 0)
            try decoder.finish()
        }
        // Byte by byte.
        var decoder = FrameDecoder()
        var decoded: [Frame] = []
        for byte in stream {
            decoder.append([byte])
            while let frame = try decoder.next() { decoded.append(frame) }
        }
        #expect(decoded == frames)
    }

    @Test func decoderRejectsHeadersBeforeThePayloadArrives() throws {
        var decoder = FrameDecoder()
        decoder.append([0x53, 0x59, 1, 1, 0, 0x00, 0x89, 0x54, 0x40])
        let error = expectCode(.oversizedFrame) { _ = try decoder.next() }
        #expect(error?.message == "frame of 9000000 bytes exceeds the 4194304-byte limit")
        // Stays failed.
        decoder.append(try valid())
        expectCode(.oversizedFrame) { _ = try decoder.next() }

        var garbage = FrameDecoder()
        garbage.append([0x47])
        expectCode(.badMagic) { _ = try garbage.next() }
        var version = FrameDecoder()
        version.append([0x53, 0x59, 9])
        expectCode(.unsupportedVersion) { _ = try version.next() }
    }

    @Test func decoderReportsATruncatedEnd() throws {
        var decoder = FrameDecoder()
        decoder.append(Array(try valid().dropLast()))
        #expect(try decoder.next() == nil)
        expectCode(.truncatedFrame) { try decoder.finish() }
    }
}

/// Encodes frames into envelope bytes and decodes them back, enforcing
/// `FrameLimits` (format version 1, see `FrameEnvelope`).
///
/// Layers, each usable on its own:
/// - `makeEnvelope` / `openEnvelope`: `Frame` <-> `Envelope` (compression);
/// - `encodeEnvelope` / `decodeEnvelope`: `Envelope` <-> bytes (header, length, checksum);
/// - `encode` / `decode`: both at once, for unencrypted frames.
@_spi(Benchmarks)
public struct FrameCodec: Sendable {
    /// The limits every frame is checked against.
    public var limits: FrameLimits
    /// How payloads are deflated (any settings decode the same). The default,
    /// `Compression.Settings.frames`, is measured in `syncsim bench`.
    public var compression: Compression.Settings

    /// Creates a codec with the given limits and compression settings (a
    /// level outside zlib's -1...9, or libdeflate's 0...12, is clamped to it;
    /// -1 is zlib's default, 6).
    public init(limits: FrameLimits = .default, compression: Compression.Settings = .frames) {
        self.limits = limits
        self.compression = compression
        self.compression.level = switch compression.compressor {
        case .zlib: min(9, max(-1, compression.level))
        case .libdeflate: min(12, max(0, compression.level))
        }
    }

    /// Creates a codec that deflates at zlib level `compressionLevel` (-1–9), zlib's defaults otherwise.
    public init(limits: FrameLimits = .default, compressionLevel: Int32) {
        self.init(limits: limits, compression: Compression.Settings(level: compressionLevel))
    }

    // MARK: Frame <-> bytes

    /// Encodes one frame: deflates the payload when it has at least
    /// `compressionThreshold` bytes and deflating makes it smaller, then
    /// writes header and payload.
    public func encode(_ frame: Frame, allowCompression: Bool = true) throws -> [UInt8] {
        try encode(frame, version: FrameEnvelope.currentVersion, allowCompression: allowCompression)
    }

    /// `encode(_:allowCompression:)` in envelope version `version`.
    package func encode(_ frame: Frame, version: UInt8, allowCompression: Bool = true) throws -> [UInt8] {
        try encodeEnvelope(makeEnvelope(frame, version: version, allowCompression: allowCompression))
    }

    /// Decodes exactly one whole, unencrypted frame. Trailing bytes throw
    /// `.protocolViolation`; missing bytes throw `.truncatedFrame`.
    public func decode(_ bytes: [UInt8]) throws -> Frame {
        try openEnvelope(decodeEnvelope(bytes))
    }

    // MARK: Frame <-> Envelope

    /// Turns a frame into an envelope, deflating the payload when allowed,
    /// at or above the threshold, and smaller afterwards.
    package func makeEnvelope(_ frame: Frame, version: UInt8 = FrameEnvelope.currentVersion, allowCompression: Bool = true) throws -> Envelope {
        try checkVersion(version)
        guard frame.payload.count <= limits.maxInflatedSize else {
            throw TransportError(
                .oversizedFrame,
                "payload of \(frame.payload.count) bytes exceeds the \(limits.maxInflatedSize)-byte limit")
        }
        var envelope = Envelope(version: version, type: frame.type, payload: frame.payload)
        if allowCompression, frame.payload.count >= max(1, limits.compressionThreshold) {
            let deflated = try Compression.deflate(frame.payload, settings: compression)
            if deflated.count < frame.payload.count {
                envelope.payload = deflated
                envelope.flags.insert(.compressed)
            }
        }
        try checkWireSize(envelope.payload.count)
        return envelope
    }

    /// Turns an unencrypted envelope back into a frame, inflating within
    /// `maxInflatedSize`. An encrypted envelope throws `.protocolViolation`:
    /// only the secure channel can open it.
    package func openEnvelope(_ envelope: Envelope) throws -> Frame {
        try checkVersion(envelope.version)
        try checkFlags(envelope.flags, type: envelope.type)
        guard !envelope.flags.contains(.encrypted) else {
            throw TransportError(
                .protocolViolation,
                "frame of type 0x\(hex(envelope.type)) is encrypted, but no secure channel is established")
        }
        return try openPlaintext(envelope)
    }

    /// Inflates when the compressed flag is set; ignores the encrypted flag
    /// (the caller already decrypted `envelope.payload`).
    func openPlaintext(_ envelope: Envelope) throws -> Frame {
        if envelope.flags.contains(.compressed) {
            let payload = try Compression.inflate(envelope.payload, maxOutputSize: limits.maxInflatedSize)
            return Frame(type: envelope.type, payload: payload)
        }
        return Frame(type: envelope.type, payload: envelope.payload)
    }

    // MARK: Envelope <-> bytes

    /// Writes an envelope's header (length and CRC-32 computed here) and
    /// payload. Checks the wire size; the version is written as given.
    package func encodeEnvelope(_ envelope: Envelope) throws -> [UInt8] {
        try checkWireSize(envelope.payload.count)
        var writer = ByteWriter(reservingCapacity: envelope.wireSize)
        writer.writeRaw(FrameEnvelope.magic)
        writer.writeUInt8(envelope.version)
        writer.writeUInt8(envelope.type)
        writer.writeUInt8(envelope.flags.rawValue)
        writer.writeUInt32(UInt32(envelope.payload.count))
        writer.writeUInt32(Checksum.crc32(envelope.payload))
        writer.writeRaw(envelope.payload)
        return writer.bytes
    }

    /// Reads exactly one envelope: checks magic, version, flags, length and
    /// checksum, without inflating or decrypting the payload.
    package func decodeEnvelope(_ bytes: [UInt8]) throws -> Envelope {
        guard let header = try parseHeader(bytes) else {
            throw TransportError(
                .truncatedFrame,
                "frame truncated: \(bytes.count) bytes, shorter than the \(FrameEnvelope.headerSize)-byte header")
        }
        let total = FrameEnvelope.headerSize + header.payloadLength
        guard bytes.count >= total else {
            throw TransportError(
                .truncatedFrame, "frame truncated: the header announces \(total) bytes, \(bytes.count) arrived")
        }
        guard bytes.count == total else {
            throw TransportError(.protocolViolation, "\(bytes.count - total) trailing bytes after the frame")
        }
        return try envelope(header, payload: Array(bytes[FrameEnvelope.headerSize..<total]))
    }

    // MARK: Incremental pieces, shared by FrameDecoder and the TCP handler

    /// Validates as much of a header as `prefix` holds, in wire order: magic,
    /// version, flags, then length against `maxFrameSize`. Returns the header
    /// once all 13 bytes are there, `nil` while fewer are.
    package func parseHeader(_ prefix: some Collection<UInt8>) throws -> EnvelopeHeader? {
        var iterator = prefix.makeIterator()
        var head: [UInt8] = []
        head.reserveCapacity(FrameEnvelope.headerSize)
        while head.count < FrameEnvelope.headerSize, let byte = iterator.next() {
            head.append(byte)
        }
        for (index, expected) in FrameEnvelope.magic.enumerated() where index < head.count {
            guard head[index] == expected else {
                let seen = head.prefix(2).map { hex($0) }.joined()
                throw TransportError(
                    .badMagic,
                    "bad magic 0x\(seen), expected 0x5359 (\"SY\"): the peer does not speak the SyncEngine frame protocol")
            }
        }
        if head.count > 2 { try checkVersion(head[2]) }
        if head.count > 4 { try checkFlags(EnvelopeFlags(rawValue: head[4]), type: head[3]) }
        guard head.count >= 9 else { return nil }
        var reader = ByteReader(Array(head[5...]))
        let length = Int(clamping: try reader.readUInt32())
        try checkWireSize(length)
        guard head.count == FrameEnvelope.headerSize else { return nil }
        return EnvelopeHeader(
            version: head[2], type: head[3], flags: EnvelopeFlags(rawValue: head[4]),
            payloadLength: length, checksum: try reader.readUInt32())
    }

    /// Completes an envelope from its parsed header and payload: checks the
    /// payload length and CRC-32.
    package func envelope(_ header: EnvelopeHeader, payload: [UInt8]) throws -> Envelope {
        guard payload.count == header.payloadLength else {
            throw TransportError(
                .truncatedFrame,
                "frame payload has \(payload.count) bytes, the header announces \(header.payloadLength)")
        }
        let actual = Checksum.crc32(payload)
        guard actual == header.checksum else {
            throw TransportError(
                .checksumMismatch,
                "checksum mismatch in a frame of type 0x\(hex(header.type)): header says \(hex32(header.checksum)), "
                    + "payload has \(hex32(actual)); the frame was corrupted in transit")
        }
        return Envelope(version: header.version, type: header.type, flags: header.flags, payload: payload)
    }

    // MARK: Checks

    func checkVersion(_ version: UInt8) throws {
        guard FrameEnvelope.supportedVersions.contains(version) else {
            throw TransportError(
                .unsupportedVersion,
                "frame format version \(version) is not supported (supported: \(FrameEnvelope.supportedVersions.lowerBound)...\(FrameEnvelope.supportedVersions.upperBound))")
        }
    }

    func checkFlags(_ flags: EnvelopeFlags, type: UInt8) throws {
        let unknown = flags.rawValue & ~EnvelopeFlags.known.rawValue
        guard unknown == 0 else {
            throw TransportError(
                .protocolViolation, "unknown flag bits 0x\(hex(unknown)) in a frame of type 0x\(hex(type))")
        }
    }

    func checkWireSize(_ size: Int) throws {
        guard size <= limits.wireLimit else {
            throw TransportError(.oversizedFrame, "frame of \(size) bytes exceeds the \(limits.wireLimit)-byte limit")
        }
    }
}

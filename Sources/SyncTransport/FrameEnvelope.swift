/// Wire envelope constants (format version 1). See `Fixtures/wire/v1/README.md`.
///
/// ```
/// offset  size  field
///      0     2  magic 0x53 0x59 ("SY")
///      2     1  format version (1)
///      3     1  message type (0x01...0xEF engine, 0xF0...0xFF transport)
///      4     1  flags: bit 0 compressed (zlib), bit 1 encrypted (ChaChaPoly)
///      5     4  payload length on the wire, UInt32 big-endian
///      9     4  CRC-32 of the payload bytes on the wire, UInt32 big-endian
///     13     n  payload
/// ```
package enum FrameEnvelope {
    /// `magic(2) version(1) type(1) flags(1) length(4) checksum(4)`.
    package static let headerSize = 13

    /// The two bytes every frame starts with: "SY".
    package static let magic: [UInt8] = [0x53, 0x59]

    /// The envelope format versions this build reads and writes.
    package static let supportedVersions: ClosedRange<UInt8> = 1...1

    /// The version written by default: the newest supported one.
    package static let currentVersion: UInt8 = supportedVersions.upperBound

    /// The header bytes a sealed (encrypted) payload authenticates:
    /// magic, version, type and flags. Length and checksum follow from the
    /// sealed bytes themselves.
    package static func authenticatedHeader(version: UInt8, type: UInt8, flags: EnvelopeFlags) -> [UInt8] {
        magic + [version, type, flags.rawValue]
    }
}

/// The flag bits of an envelope header.
package struct EnvelopeFlags: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The flags byte of the header.
    package let rawValue: UInt8

    /// Creates flags from the header byte.
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Bit 0: the payload was deflated (zlib format) before any encryption.
    package static let compressed = EnvelopeFlags(rawValue: 1 << 0)
    /// Bit 1: the payload is sealed with the connection's ChaChaPoly key.
    package static let encrypted = EnvelopeFlags(rawValue: 1 << 1)
    /// Every bit version 1 defines; any other bit is a protocol violation.
    package static let known: EnvelopeFlags = [.compressed, .encrypted]

    /// The flag names, such as `[compressed, encrypted]`.
    package var description: String {
        var names: [String] = []
        if contains(.compressed) { names.append("compressed") }
        if contains(.encrypted) { names.append("encrypted") }
        let unknown = rawValue & ~EnvelopeFlags.known.rawValue
        if unknown != 0 { names.append("unknown(0x\(hex(unknown)))") }
        return "[" + names.joined(separator: ", ") + "]"
    }
}

/// One frame as it travels: header fields plus the payload exactly as it is
/// on the wire (possibly compressed and/or encrypted, as `flags` say).
///
/// `FrameCodec.makeEnvelope` / `openEnvelope` convert between `Frame` and
/// `Envelope` (compression); the secure channel seals and opens encrypted
/// envelopes; `encodeEnvelope` / `decodeEnvelope` convert to and from bytes.
package struct Envelope: Sendable, Hashable {
    /// The envelope format version.
    package var version: UInt8
    /// The message type.
    package var type: UInt8
    /// Compressed / encrypted bits.
    package var flags: EnvelopeFlags
    /// The payload bytes as on the wire.
    package var payload: [UInt8]

    /// Creates an envelope from its parts.
    package init(version: UInt8 = FrameEnvelope.currentVersion, type: UInt8, flags: EnvelopeFlags = [], payload: [UInt8]) {
        self.version = version
        self.type = type
        self.flags = flags
        self.payload = payload
    }

    /// The number of bytes this envelope takes on the wire.
    package var wireSize: Int { FrameEnvelope.headerSize + payload.count }
}

/// The parsed, validated 13-byte header of an envelope.
package struct EnvelopeHeader: Sendable, Hashable {
    /// The envelope format version.
    package var version: UInt8
    /// The message type.
    package var type: UInt8
    /// Compressed / encrypted bits.
    package var flags: EnvelopeFlags
    /// The payload length on the wire.
    package var payloadLength: Int
    /// The CRC-32 the payload must have.
    package var checksum: UInt32
}

/// Two lowercase hex digits per byte, for messages and ids.
func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
}

/// Lowercase hex of bytes.
func hex(_ bytes: [UInt8]) -> String {
    bytes.map { hex($0) }.joined()
}

/// `0x` and eight hex digits.
func hex32(_ value: UInt32) -> String {
    "0x" + hex([UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16),
                UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)])
}

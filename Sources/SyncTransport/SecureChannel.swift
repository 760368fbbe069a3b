import Crypto
import Foundation

/// Seals outgoing frames with ChaChaPoly under one direction's key.
///
/// The payload is compressed first (when worth it), then sealed; the wire
/// payload is `ciphertext || tag(16)`. The 12-byte nonce is never sent: it is
/// four zero bytes and a big-endian counter that starts at 0 and grows by one
/// per frame, so the receiver rejects any frame that is replayed, reordered,
/// dropped-then-resent or tampered with. The authenticated data is the
/// header's magic, version, type and flags.
struct FrameSealer: Sendable {
    static let tagSize = 16
    let key: SymmetricKey
    let version: UInt8
    let codec: FrameCodec
    private(set) var counter: UInt64 = 0

    init(key: SymmetricKey, version: UInt8, codec: FrameCodec) {
        self.key = key
        self.version = version
        self.codec = codec
    }

    /// Compresses (when worth it) and seals a frame.
    mutating func seal(_ frame: Frame) throws -> Envelope {
        try seal(envelope: codec.makeEnvelope(frame, version: version))
    }

    /// Seals an envelope whose payload is already in its plaintext wire form
    /// (compressed or not, as its flags say).
    mutating func seal(envelope plain: Envelope) throws -> Envelope {
        var envelope = plain
        envelope.flags.insert(.encrypted)
        try codec.checkWireSize(envelope.payload.count + Self.tagSize)
        let aad = FrameEnvelope.authenticatedHeader(version: envelope.version, type: envelope.type, flags: envelope.flags)
        let box = try ChaChaPoly.seal(envelope.payload, using: key, nonce: Self.nonce(counter), authenticating: aad)
        counter += 1
        // `combined` is nonce || ciphertext || tag: one copy of what follows the nonce.
        envelope.payload = Array(box.combined.dropFirst(Self.nonceSize))
        return envelope
    }

    static let nonceSize = 12

    /// The nonce's bytes: four zero bytes and the big-endian counter.
    static func nonceBytes(_ counter: UInt64) -> [UInt8] {
        var writer = ByteWriter(reservingCapacity: nonceSize)
        writer.writeUInt32(0)
        writer.writeUInt64(counter)
        return writer.bytes
    }

    static func nonce(_ counter: UInt64) throws -> ChaChaPoly.Nonce {
        try ChaChaPoly.Nonce(data: nonceBytes(counter))
    }
}

/// Opens incoming frames sealed by the peer's `FrameSealer`, in order.
struct FrameOpener: Sendable {
    let key: SymmetricKey
    let version: UInt8
    let codec: FrameCodec
    private(set) var counter: UInt64 = 0

    init(key: SymmetricKey, version: UInt8, codec: FrameCodec) {
        self.key = key
        self.version = version
        self.codec = codec
    }

    mutating func open(_ envelope: Envelope) throws -> Frame {
        guard envelope.flags.contains(.encrypted) else {
            throw TransportError(
                .decryptionFailed,
                "an unencrypted frame of type 0x\(hex(envelope.type)) arrived on an authenticated connection")
        }
        guard envelope.version == version else {
            throw TransportError(
                .decryptionFailed, "a frame of version \(envelope.version) arrived on a version \(version) connection")
        }
        guard envelope.payload.count >= FrameSealer.tagSize else {
            throw TransportError(.decryptionFailed, "an encrypted frame is shorter than its authentication tag")
        }
        let aad = FrameEnvelope.authenticatedHeader(version: envelope.version, type: envelope.type, flags: envelope.flags)
        let plaintext: Data
        do {
            // One buffer, nonce || ciphertext || tag, as the box keeps it.
            var combined = Data(capacity: FrameSealer.nonceSize + envelope.payload.count)
            combined.append(contentsOf: FrameSealer.nonceBytes(counter))
            combined.append(contentsOf: envelope.payload)
            let box = try ChaChaPoly.SealedBox(combined: combined)
            plaintext = try ChaChaPoly.open(box, using: key, authenticating: aad)
        } catch {
            throw TransportError(
                .decryptionFailed,
                "frame \(counter) (type 0x\(hex(envelope.type))) failed authentication: tampered, replayed, reordered or from another session")
        }
        counter += 1
        var opened = envelope
        opened.payload = Array(plaintext)
        return try codec.openPlaintext(opened)
    }
}

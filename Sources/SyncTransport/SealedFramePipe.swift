import Crypto

/// Seals and opens frames exactly as an established TCP connection does
/// (deflate when worth it, ChaCha20-Poly1305 with a counter nonce, envelope),
/// without a socket or handshake: one random key for both directions.
///
/// For the micro benchmarks in Benchmarks/; `@_spi(Benchmarks)`: not part of
/// the stable API.
@_spi(Benchmarks)
public struct SealedFramePipe: Sendable {
    private let key = SymmetricKey(size: .bits256)
    private let codec: FrameCodec
    private var sealer: FrameSealer
    private var opener: FrameOpener

    public init(codec: FrameCodec = FrameCodec()) {
        self.codec = codec
        sealer = FrameSealer(key: key, version: FrameEnvelope.currentVersion, codec: codec)
        opener = FrameOpener(key: key, version: FrameEnvelope.currentVersion, codec: codec)
    }

    /// Compresses (when worth it), seals and encodes one frame into wire bytes.
    public mutating func seal(_ frame: Frame) throws -> [UInt8] {
        try codec.encodeEnvelope(sealer.seal(frame))
    }

    /// Decodes the envelope (header, length, CRC-32), decrypts and
    /// authenticates it, and inflates the payload. Frames must be opened in
    /// the order they were sealed.
    public mutating func open(_ wire: [UInt8]) throws -> Frame {
        try opener.open(codec.decodeEnvelope(wire))
    }

    /// Sets both nonce counters back to zero, so the first sealed frame can
    /// be opened again.
    public mutating func rewind() {
        sealer = FrameSealer(key: key, version: FrameEnvelope.currentVersion, codec: codec)
        opener = FrameOpener(key: key, version: FrameEnvelope.currentVersion, codec: codec)
    }
}

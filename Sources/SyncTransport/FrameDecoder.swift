/// Decodes a stream of envelope bytes that arrive in arbitrary pieces.
///
/// Each header is checked (magic, version, flags, length against
/// `maxFrameSize`) as soon as its bytes are there, before the payload is
/// waited for; then the checksum, then bounded inflation. After an error the
/// decoder stays failed: every later call rethrows the same error.
package struct FrameDecoder: Sendable {
    /// The codec whose limits apply.
    package var codec: FrameCodec
    private var buffer: [UInt8] = []
    private var start = 0
    private var failure: TransportError?

    /// Creates a decoder with the given limits.
    package init(limits: FrameLimits = .default) {
        self.codec = FrameCodec(limits: limits)
    }

    /// Bytes received but not decoded yet.
    package var bufferedByteCount: Int { buffer.count - start }

    /// Adds bytes read from the wire.
    package mutating func append(_ bytes: [UInt8]) {
        if start > 0, start >= buffer.count / 2 {
            buffer.removeSubrange(0..<start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next whole, unencrypted frame, or `nil` while it is incomplete.
    /// Throws `TransportError` on bad input.
    package mutating func next() throws -> Frame? {
        guard let envelope = try nextEnvelope() else { return nil }
        do {
            return try codec.openEnvelope(envelope)
        } catch let error as TransportError {
            failure = error
            throw error
        }
    }

    /// The next whole envelope (payload still compressed and/or encrypted),
    /// or `nil` while it is incomplete.
    package mutating func nextEnvelope() throws -> Envelope? {
        if let failure { throw failure }
        do {
            let available = buffer[start...]
            guard let header = try codec.parseHeader(available) else { return nil }
            let total = FrameEnvelope.headerSize + header.payloadLength
            guard available.count >= total else { return nil }
            let payloadStart = start + FrameEnvelope.headerSize
            let payload = Array(buffer[payloadStart..<payloadStart + header.payloadLength])
            start += total
            return try codec.envelope(header, payload: payload)
        } catch let error as TransportError {
            failure = error
            throw error
        }
    }

    /// Throws `.truncatedFrame` if bytes of an incomplete frame are left:
    /// call when the stream ended.
    package func finish() throws {
        if let failure { throw failure }
        if bufferedByteCount > 0 {
            throw TransportError(
                .truncatedFrame, "the stream ended inside a frame; only \(bufferedByteCount) bytes of it arrived")
        }
    }
}

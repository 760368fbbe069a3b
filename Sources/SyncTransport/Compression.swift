import CZlib

/// zlib-format compression (RFC 1950) with bounded inflation.
public enum Compression {
    /// Compresses `bytes` in zlib format at `level` (0 = store, 9 = smallest,
    /// -1 = zlib's default).
    public static func deflate(_ bytes: [UInt8], level: Int32 = 6) throws -> [UInt8] {
        guard level == Z_DEFAULT_COMPRESSION || (0...9).contains(level) else {
            throw TransportError(.protocolViolation, "compression level \(level) is not in -1...9")
        }
        // zlib wants a non-null input pointer even for zero bytes.
        let input = bytes.isEmpty ? [0] : bytes
        var output = [UInt8](repeating: 0, count: Int(compressBound(UInt(bytes.count))))
        var outputLength = UInt(output.count)
        let status = output.withUnsafeMutableBufferPointer { out in
            input.withUnsafeBufferPointer { source in
                compress2(out.baseAddress!, &outputLength, source.baseAddress!, UInt(bytes.count), level)
            }
        }
        guard status == Z_OK else {
            throw TransportError(.decompressionFailed, "zlib could not compress (status \(status))")
        }
        output.removeSubrange(Int(outputLength)...)
        return output
    }

    /// Inflates zlib-format `bytes`. Output beyond `maxOutputSize` bytes
    /// throws `.decompressionFailed` without allocating more than the limit;
    /// corrupt, truncated or trailing input throws `.decompressionFailed`.
    public static func inflate(_ bytes: [UInt8], maxOutputSize: Int) throws -> [UInt8] {
        guard !bytes.isEmpty else {
            throw TransportError(.decompressionFailed, "compressed data is empty")
        }
        let limit = max(0, maxOutputSize)
        var stream = z_stream()
        let initStatus = inflateInit_(&stream, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard initStatus == Z_OK else {
            throw TransportError(.decompressionFailed, "zlib could not start inflating (status \(initStatus))")
        }
        defer { inflateEnd(&stream) }

        // Start small and grow by doubling, never past the limit.
        var output = [UInt8](repeating: 0, count: min(limit, max(64, bytes.count * 4)))
        var probe: [UInt8] = [0]
        var produced = 0
        return try bytes.withUnsafeBufferPointer { input in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress!)
            stream.avail_in = UInt32(clamping: input.count)
            while true {
                if produced == output.count, output.count < limit {
                    let grown = min(limit, max(64, output.count * 2))
                    output.append(contentsOf: repeatElement(0, count: grown - output.count))
                }
                let status: Int32
                if produced < output.count {
                    status = output.withUnsafeMutableBufferPointer { out in
                        stream.next_out = out.baseAddress! + produced
                        stream.avail_out = UInt32(clamping: out.count - produced)
                        let result = CZlib.inflate(&stream, Z_NO_FLUSH)
                        produced = out.count - Int(stream.avail_out)
                        return result
                    }
                } else {
                    // At the limit: if even one more byte comes out, the limit is exceeded.
                    status = probe.withUnsafeMutableBufferPointer { out in
                        stream.next_out = out.baseAddress!
                        stream.avail_out = 1
                        return CZlib.inflate(&stream, Z_NO_FLUSH)
                    }
                    if stream.avail_out == 0 {
                        throw TransportError(
                            .decompressionFailed, "inflated data exceeds the \(limit)-byte limit")
                    }
                    if status == Z_BUF_ERROR || status == Z_OK {
                        // No output and no end of stream: the input ran out.
                        throw TransportError(.decompressionFailed, "compressed data is truncated")
                    }
                }
                switch status {
                case Z_STREAM_END:
                    guard stream.avail_in == 0 else {
                        throw TransportError(
                            .decompressionFailed, "\(stream.avail_in) trailing bytes after the compressed data")
                    }
                    output.removeSubrange(produced...)
                    return output
                case Z_OK:
                    continue
                case Z_BUF_ERROR where stream.avail_in == 0:
                    throw TransportError(.decompressionFailed, "compressed data is truncated")
                case Z_BUF_ERROR:
                    continue
                default:
                    throw TransportError(.decompressionFailed, "compressed data is corrupt (zlib status \(status))")
                }
            }
        }
    }
}

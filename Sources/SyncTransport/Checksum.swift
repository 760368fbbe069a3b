import CZlib
#if canImport(CLibdeflate)
import CLibdeflate
#endif

/// Checksums of the frame envelope.
package enum Checksum {
    /// The CRC-32 of `bytes` (zlib's `crc32`: the IEEE 802.3 polynomial).
    package static func crc32(_ bytes: [UInt8]) -> UInt32 {
        crc32(bytes, continuing: 0)
    }

    /// Continues a CRC-32 over more bytes: `crc32(b, continuing: crc32(a))`
    /// equals `crc32(a + b)`. With libdeflate where this build has it (several
    /// times zlib's speed, the same values), else with zlib.
    package static func crc32(_ bytes: [UInt8], continuing crc: UInt32) -> UInt32 {
        #if canImport(CLibdeflate)
        // (libdeflate reads a null buffer as a request for the initial value, 0.)
        if bytes.isEmpty { return crc }
        return bytes.withUnsafeBytes { libdeflate_crc32(crc, $0.baseAddress, $0.count) }
        #else
        return zlibCRC32(bytes, continuing: crc)
        #endif
    }

    /// zlib's CRC-32 (what `crc32` computes where libdeflate is missing).
    package static func zlibCRC32(_ bytes: [UInt8], continuing crc: UInt32) -> UInt32 {
        bytes.withUnsafeBufferPointer { buffer in
            var value = UInt(crc)
            var offset = 0
            while offset < buffer.count {
                let chunk = min(buffer.count - offset, Int(clamping: UInt32.max))
                value = CZlib.crc32(value, buffer.baseAddress! + offset, UInt32(chunk))
                offset += chunk
            }
            return UInt32(truncatingIfNeeded: value)
        }
    }
}

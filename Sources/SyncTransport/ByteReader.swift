/// Reads what `ByteWriter` wrote, from a byte array, front to back.
///
/// Every read checks the remaining input first: reading past the end throws
/// `TransportError(.truncatedFrame)`, a length prefix over the caller's limit
/// throws `.oversizedFrame`, and no read allocates more than the input holds.
package struct ByteReader: Sendable {
    private let bytes: [UInt8]
    private var index: Int

    /// Creates a reader positioned at the first byte.
    package init(_ bytes: [UInt8]) {
        self.bytes = bytes
        self.index = 0
    }

    /// Whether every byte has been read.
    package var isAtEnd: Bool { index >= bytes.count }

    /// The number of bytes not read yet.
    package var remaining: Int { bytes.count - index }

    /// Reads one byte.
    package mutating func readUInt8() throws -> UInt8 {
        try require(1, what: "UInt8")
        defer { index += 1 }
        return bytes[index]
    }

    /// Reads a big-endian 16-bit unsigned integer.
    package mutating func readUInt16() throws -> UInt16 {
        try readBigEndian()
    }

    /// Reads a big-endian 32-bit unsigned integer.
    package mutating func readUInt32() throws -> UInt32 {
        try readBigEndian()
    }

    /// Reads a big-endian 64-bit unsigned integer.
    package mutating func readUInt64() throws -> UInt64 {
        try readBigEndian()
    }

    /// Reads an unsigned LEB128 varint of at most 10 bytes. An overlong or
    /// overflowing varint throws `.protocolViolation`.
    package mutating func readVarInt() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard index < bytes.count else {
                throw TransportError(.truncatedFrame, "input ends inside a varint")
            }
            let byte = bytes[index]
            index += 1
            let low = UInt64(byte & 0x7F)
            if shift == 63, low > 1 {
                throw TransportError(.protocolViolation, "varint overflows 64 bits")
            }
            result |= low << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 {
                throw TransportError(.protocolViolation, "varint longer than 10 bytes")
            }
        }
    }

    /// Reads a varint length prefix, then that many bytes. A length above
    /// `maxLength` throws `.oversizedFrame` before anything is allocated.
    package mutating func readBytes(maxLength: Int) throws -> [UInt8] {
        let length = try readLength(maxLength: maxLength, what: "byte string")
        return try readRaw(count: length)
    }

    /// Reads exactly `count` bytes that have no length prefix.
    package mutating func readRaw(count: Int) throws -> [UInt8] {
        guard count >= 0 else {
            throw TransportError(.protocolViolation, "negative byte count \(count)")
        }
        try require(count, what: "\(count) raw bytes")
        defer { index += count }
        return Array(bytes[index..<index + count])
    }

    /// Reads a varint-length-prefixed UTF-8 string of at most `maxLength`
    /// bytes. Invalid UTF-8 throws `.protocolViolation`.
    package mutating func readString(maxLength: Int) throws -> String {
        let length = try readLength(maxLength: maxLength, what: "string")
        try require(length, what: "a \(length)-byte string")
        defer { index += length }
        guard let string = String(validating: bytes[index..<index + length], as: UTF8.self) else {
            throw TransportError(.protocolViolation, "a \(length)-byte string is not valid UTF-8")
        }
        return string
    }

    private mutating func readLength(maxLength: Int, what: String) throws -> Int {
        let length = try readVarInt()
        guard length <= UInt64(max(0, maxLength)) else {
            throw TransportError(
                .oversizedFrame, "\(what) of \(length) bytes exceeds the \(maxLength)-byte limit")
        }
        let count = Int(length)
        guard count <= remaining else {
            throw TransportError(
                .truncatedFrame, "\(what) of \(count) bytes, but only \(remaining) bytes remain")
        }
        return count
    }

    /// `what` is only built for the error (reads are hot: no string work on success).
    private func require(_ count: Int, what: @autoclosure () -> String) throws {
        guard count <= remaining else {
            throw TransportError(
                .truncatedFrame, "need \(count) bytes for \(what()), but only \(remaining) remain")
        }
    }

    private mutating func readBigEndian<T: FixedWidthInteger>() throws -> T {
        let size = MemoryLayout<T>.size
        try require(size, what: "\(T.self)")
        var value: T = 0
        for offset in 0..<size {
            value = value << 8 | T(bytes[index + offset])
        }
        index += size
        return value
    }
}

/// Appends big-endian integers, LEB128 varints and length-prefixed byte
/// strings to a growing byte array. The counterpart of `ByteReader`.
package struct ByteWriter: Sendable, Equatable {
    /// The bytes written so far.
    package var bytes: [UInt8]

    /// Creates an empty writer.
    package init() {
        bytes = []
    }

    /// Creates an empty writer with room for `capacity` bytes.
    package init(reservingCapacity capacity: Int) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Appends one byte.
    package mutating func writeUInt8(_ value: UInt8) {
        bytes.append(value)
    }

    /// Appends a 16-bit unsigned integer, big-endian.
    package mutating func writeUInt16(_ value: UInt16) {
        writeBigEndian(value)
    }

    /// Appends a 32-bit unsigned integer, big-endian.
    package mutating func writeUInt32(_ value: UInt32) {
        writeBigEndian(value)
    }

    /// Appends a 64-bit unsigned integer, big-endian.
    package mutating func writeUInt64(_ value: UInt64) {
        writeBigEndian(value)
    }

    /// Appends an unsigned LEB128 varint (1 to 10 bytes, low 7 bits first).
    package mutating func writeVarInt(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    /// Appends a byte string prefixed with its length as a varint.
    package mutating func writeBytes(_ value: [UInt8]) {
        writeVarInt(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// Appends bytes as they are, without a length prefix.
    package mutating func writeRaw(_ value: [UInt8]) {
        bytes.append(contentsOf: value)
    }

    /// Appends a string as UTF-8, prefixed with its byte length as a varint.
    package mutating func writeString(_ value: String) {
        let utf8 = value.utf8
        writeVarInt(UInt64(utf8.count))
        bytes.append(contentsOf: utf8)
    }

    private mutating func writeBigEndian<T: FixedWidthInteger>(_ value: T) {
        let size = MemoryLayout<T>.size
        for index in stride(from: size - 1, through: 0, by: -1) {
            bytes.append(UInt8(truncatingIfNeeded: value >> (index * 8)))
        }
    }
}

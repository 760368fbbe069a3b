import SyncTransport

extension ByteWriter {
    mutating func write(_ t: HLCTimestamp) {
        writeUInt64(UInt64(bitPattern: t.packed))
        writeUInt32(t.node)
    }

    mutating func write(_ e: WireEntry) {
        writeString(e.key)
        write(e.version)
        write(e.base)
        writeUInt8(e.deleted ? 1 : 0)
        writeString(e.encoding)
        if !e.deleted { writeBytes(e.value ?? []) }
    }
}

extension ByteReader {
    mutating func readTimestamp() throws -> HLCTimestamp {
        HLCTimestamp(packed: Int64(bitPattern: try readUInt64()), node: try readUInt32())
    }

    mutating func readCount() throws -> Int {
        let count = try readVarInt()
        guard count <= UInt64(SyncMessage.maxCount), count <= UInt64(remaining) else {
            throw SyncError(.malformedMessage, "a count of \(count) exceeds what the payload can hold")
        }
        return Int(count)
    }

    /// A key name (or declaration line) in NFC, whatever spelling the peer sent.
    mutating func readKeyName() throws -> String { try KeyName.canonicalFromPeer(try readString(maxLength: SyncMessage.maxNameLength)) }

    mutating func readEntry() throws -> WireEntry {
        let key = try readKeyName()
        let version = try readTimestamp()
        let base = try readTimestamp()
        let flags = try readUInt8()
        guard flags <= 1 else { throw SyncError(.malformedMessage, "entry flags \(flags) are not defined") }
        let encoding = try readString(maxLength: SyncMessage.maxEncodingLength)
        let value: [UInt8]? = flags == 1 ? nil : try readBytes(maxLength: SyncMessage.maxValueLength)
        return WireEntry(key: key, version: version, base: base, deleted: flags == 1, encoding: encoding, value: value)
    }
}

import SyncTransport

extension SyncMessage {
    /// The payload schema of a chunk acknowledgement that refuses its value
    /// for good (protocol 7): this byte, the schema-5 fields, then `string(128)`
    /// the refusal code (not empty; the acknowledgement completes). Schema 6
    /// is not used (protocol 6 changed no message).
    public static let refusalPayloadSchema: UInt8 = 7
    /// The first protocol version whose chunk acknowledgements say that the
    /// receiver refused the value, and with which code: the sender reports
    /// it as it reports an entry a batch's acknowledgement refused.
    public static let refusalProtocol: UInt16 = 7
}

extension SyncMessage.ChunkAck {
    /// This acknowledgement in payload schema 5, or 7 when it refuses the value
    /// and `protocolVersion` is 7 or later; nil when it does not name its value.
    func namingValue(protocolVersion: UInt16) -> Frame? {
        guard let value, let staged else { return nil }
        let refusal = protocolVersion >= SyncMessage.refusalProtocol ? self.refusal.flatMap { $0.isEmpty ? nil : $0 } : nil
        var w = ByteWriter()
        w.writeUInt8(refusal == nil ? SyncMessage.valuePayloadSchema : SyncMessage.refusalPayloadSchema)
        w.writeString(key)
        w.write(version)
        w.writeVarInt(UInt64(index))
        w.writeUInt8(complete || refusal != nil ? 1 : 0)
        w.writeVarInt(UInt64(value.totalSize))
        w.writeUInt32(value.totalChecksum)
        w.writeVarInt(UInt64(max(0, staged)))
        if let refusal { w.writeString(String(refusal.utf8.prefix(128)) ?? "refused") }
        return Frame(type: SyncMessage.MessageType.chunkAck.rawValue, payload: w.bytes)
    }

    /// Reads an acknowledgement of payload schema 5 or 7 (after its schema byte).
    static func namingValue(_ r: inout ByteReader, schema: UInt8, type: SyncMessage.MessageType) throws -> SyncMessage.ChunkAck {
        guard type == .chunkAck else {
            throw SyncError(.malformedMessage, "a \(type) message cannot be of payload schema \(schema) (only chunk acknowledgements are)")
        }
        let key = try r.readKeyName()
        let version = try r.readTimestamp()
        let index = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
        let complete = try r.readUInt8() != 0
        let size = try r.readVarInt() & 0xFFFF_FFFF, checksum = try r.readUInt32(), staged = try r.readVarInt()
        guard size >= 1 else {
            throw SyncError(.malformedMessage, "a chunk acknowledgement names a value of \(size) bytes, out of range")
        }
        guard staged <= UInt64(SyncMessage.maxCount) else {
            throw SyncError(.malformedMessage, "a chunk acknowledgement counts \(staged) staged chunks, out of range")
        }
        var refusal: String?
        if schema == SyncMessage.refusalPayloadSchema {
            let code = try r.readString(maxLength: 128)
            guard !code.isEmpty, complete else {
                throw SyncError(.malformedMessage, "a chunk acknowledgement that refuses its value must name a code and complete the value")
            }
            refusal = code
        }
        guard r.isAtEnd else { throw SyncError(.malformedMessage, "\(type) message has \(r.remaining) trailing bytes") }
        return SyncMessage.ChunkAck(key: key, version: version, index: index, complete: complete,
                                    value: SyncMessage.ChunkedValue(totalSize: Int(clamping: size), totalChecksum: checksum),
                                    staged: Int(staged), refusal: refusal)
    }
}

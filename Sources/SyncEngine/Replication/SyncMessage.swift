import SyncTransport

/// One entry as it travels: key, version, the version its writer had seen,
/// deletion flag, serializer id and plaintext value bytes.
@_spi(Benchmarks)
public struct WireEntry: Sendable, Equatable {
    public var key: String
    public var version: HLCTimestamp
    public var base: HLCTimestamp
    public var deleted: Bool
    public var encoding: String
    public var value: [UInt8]?

    public init(key: String, version: HLCTimestamp, base: HLCTimestamp, deleted: Bool, encoding: String, value: [UInt8]?) {
        self.key = key
        self.version = version
        self.base = base
        self.deleted = deleted
        self.encoding = encoding
        self.value = value
    }

    var state: EntryState { EntryState(version: version, base: base, deleted: deleted, value: deleted ? nil : value) }
}

/// A large value transfer the receiver has partly staged; the sender resumes after it.
@_spi(Benchmarks)
public struct PartialTransfer: Sendable, Equatable {
    public var key: String
    public var version: HLCTimestamp
    /// Chunks 0..<received are durably staged.
    public var received: Int
}

/// The session messages of the replication protocol (payload schema 1; a
/// batch of session protocol 2 is columnar, payload schema 2).
@_spi(Benchmarks)
public enum SyncMessage: Sendable, Equatable {
    public struct Hello: Sendable, Equatable {
        public var protocolRange: ClosedRange<UInt16>
        public var node: UInt32
        public var role: DeviceRole
        /// True when this hello answers the peer's.
        public var isReply: Bool
        public var pairingEpoch: String
        public var registryFingerprint: [UInt8]
        /// Canonical declarations of the keys that may cross (never a local-only key).
        public var declarations: [String]
        public var partialTransfers: [PartialTransfer]
    }

    public struct Batch: Sendable, Equatable {
        public var id: UInt64
        public var entries: [WireEntry]
        /// The stretch of the sender's stream this batch completes (protocol 3).
        public var range: StreamRange? = nil
    }

    /// A stretch of the sender's stream of changes, `lower` exclusive to
    /// `upper` inclusive: every change in it that the receiver gets is in
    /// this message, and the stream before `lower` went in the sender's
    /// earlier messages of the session (or was acknowledged before it).
    /// What lets the receiver tell the sender, in a later session, how far it
    /// has received the stream (a `receipt`), even when an acknowledgement was lost.
    public struct StreamRange: Sendable, Equatable {
        public var lower: Int64
        public var upper: Int64
        /// The sender's clock (packed) when it read its stream through
        /// `upper`: every change there had a version at or before it. A
        /// receipt hands it back, so that the sender can tell whether its
        /// stream up to there is still the one the receiver saw (a power cut
        /// that lost the stream's tail lets positions be given out again, to
        /// changes with newer versions).
        public var anchor: Int64
    }

    /// Sent first by each side of a protocol-3 session: how far this side
    /// has received and applied the peer's stream (`receivedThrough`, the
    /// `upper` of the message ranges it holds without a gap), and how far it
    /// knows the peer acknowledged its own (`acknowledgedThrough`, its cursor
    /// for the peer). A watch reads nothing of its stream for the phone
    /// before the phone's receipt, and starts after `receivedThrough`: a
    /// write the phone received but whose acknowledgement was lost is not
    /// sent again (the phone may have deleted that key since and purged the
    /// tombstone). Acknowledged with an `ack` of `id`.
    public struct Receipt: Sendable, Equatable {
        public var id: UInt64
        public var receivedThrough: Int64
        /// The anchor of the ranges received through `receivedThrough` (the newest; 0 with none).
        public var receivedAnchor: Int64
        public var acknowledgedThrough: Int64
        /// This side's clock (packed) as it wrote the receipt: its stream
        /// through `acknowledgedThrough` had no newer version.
        public var acknowledgedAnchor: Int64
    }

    public struct Ack: Sendable, Equatable {
        public var batchID: UInt64
        public var applied: Int
        /// Entries refused, with an error code (never a value).
        public var rejected: [Rejection]
    }

    public struct Rejection: Sendable, Equatable {
        public var key: String
        public var code: String
    }

    public struct Chunk: Sendable, Equatable {
        public var entry: WireEntry
        public var totalSize: Int
        public var totalChecksum: UInt32
        public var index: Int
        public var count: Int
        public var checksum: UInt32
        public var bytes: [UInt8]
        /// The stretch of the sender's stream the whole value completes (protocol 3; every chunk carries it).
        public var range: StreamRange? = nil
    }

    public struct ChunkAck: Sendable, Equatable {
        public var key: String
        public var version: HLCTimestamp
        public var index: Int
        public var complete: Bool
        /// The value the acknowledged chunk belongs to (protocol 5; nil before):
        /// a resolver's merge gives one version two values.
        public var value: ChunkedValue? = nil
        /// How many chunks of that value, from index 0, the receiver holds staged
        /// without a gap (protocol 5; nil before): where a resumed transfer goes on.
        public var staged: Int? = nil
        /// The code the receiver refused the value with, for good (protocol 7,
        /// payload schema 7; nil when taken, or before): `value-too-large`, …
        public var refusal: String? = nil
    }

    /// One value of a version, as its chunks name it: its size and CRC-32.
    public struct ChunkedValue: Sendable, Hashable {
        public var totalSize: Int
        public var totalChecksum: UInt32

        public init(totalSize: Int, totalChecksum: UInt32) {
            self.totalSize = totalSize
            self.totalChecksum = totalChecksum
        }
    }

    public struct ErrorMessage: Sendable, Equatable {
        public var code: String
        public var message: String
    }

    /// A phone's notice to a watch it has no cursor for, before the full
    /// baseline: it purged tombstones up to `purgedThrough` (a packed version),
    /// so the watch removes what the phone already knew up to there (the
    /// baseline brings back what is alive). Acknowledged with an `ack` of `id`.
    public struct Rebaseline: Sendable, Equatable {
        public var id: UInt64
        public var purgedThrough: Int64
        /// The re-baseline generation the notice starts (protocol 4; nil in
        /// older sessions): the watch passes over queued batches the phone
        /// posted in an older one.
        public var generation: Int64?

        public init(id: UInt64, purgedThrough: Int64, generation: Int64? = nil) {
            self.id = id
            self.purgedThrough = purgedThrough
            self.generation = generation
        }
    }

    /// A sender's word that it has nothing more for the receiver (nothing
    /// pending, everything acknowledged): the receiver is idle only once it
    /// has it. Acknowledged with an `ack` of `id`; `id` is numbered with the
    /// sender's batches, so a late notice older than a batch is ignored.
    /// Protocol 2: sent only when both peers speak it.
    public struct CaughtUp: Sendable, Equatable {
        public var id: UInt64
    }

    /// A request for the receiver's manual changes (`SyncPeer.requestManualChanges()`),
    /// answered with a `manualReply` of the same `id`. Protocol 2.
    public struct ManualRequest: Sendable, Equatable {
        public var id: UInt64
    }

    /// The answer to a `manualRequest`: whether the receiver released its
    /// manual changes (its `ReplicationConfiguration.answersManualRequests`),
    /// and how many entries that released (they follow as batches).
    /// `replyID` is numbered with the answering side's batches and notices
    /// (released changes come after its earlier caught-up notice). Protocol 2.
    public struct ManualReply: Sendable, Equatable {
        public var id: UInt64
        public var accepted: Bool
        public var released: Int
        public var replyID: UInt64
    }

    case hello(Hello)
    case batch(Batch)
    case ack(Ack)
    case chunk(Chunk)
    case chunkAck(ChunkAck)
    case error(ErrorMessage)
    case rebaseline(Rebaseline)
    case caughtUp(CaughtUp)
    case manualRequest(ManualRequest)
    case manualReply(ManualReply)
    case receipt(Receipt)

    /// Frame type numbers of the engine's messages.
    public enum MessageType: UInt8, Sendable {
        case hello = 1, batch = 2, ack = 3, chunk = 4, chunkAck = 5, error = 6, rebaseline = 7, caughtUp = 8, manualRequest = 9, manualReply = 10, receipt = 11
    }

    /// The payload schema version written as each payload's first byte.
    public static let payloadSchema: UInt8 = 1
    static let maxNameLength = 1024
    /// The longest value encoding (serializer identifier) a peer accepts, in bytes.
    static let maxEncodingLength = 64
    static let maxValueLength = 8 * 1024 * 1024
    static let maxCount = 1_000_000
}

extension SyncMessage {
    /// The highest session protocol version this build speaks: 7. From 2
    /// on batches are columnar (`ColumnarBatch`, payload schema 2); from 3 on
    /// batches and chunks name the stretch of the stream they complete
    /// (payload schema 3 wraps their payload) and each side sends a
    /// `receipt` first; from 4 on a re-baseline notice names the generation
    /// it starts (payload schema 4); from 5 on a chunk acknowledgement names
    /// the value and how many of its chunks are staged (payload schema 5);
    /// 6 adds no message (`nodeRenewalProtocol`); from 7 on one that refuses
    /// the value names the code (payload schema 7, `refusalProtocol`). Every
    /// other message, and every batch of a session that negotiated 1, is schema 1.
    public static let highestProtocolVersion: UInt16 = 7

    /// The payload schema of a batch or chunk that names its stream range
    /// (protocol 3): this byte, `varint` lower, `varint` upper, then the
    /// message's own payload (schema 1 or 2).
    public static let rangedPayloadSchema: UInt8 = 3
    /// The first protocol version with stream ranges and receipts.
    public static let receiptProtocol: UInt16 = 3
    /// The payload schema of a re-baseline notice that names its generation
    /// (protocol 4): this byte, `varint` id, `u64` purged-through version,
    /// `varint` generation.
    public static let generationPayloadSchema: UInt8 = 4
    /// The first protocol version whose re-baseline notices name their generation.
    public static let generationProtocol: UInt16 = 4
    /// The payload schema of a chunk acknowledgement that names the value
    /// (protocol 5): this byte, the schema-1 fields, `varint` totalSize,
    /// `u32` totalChecksum, `varint` staged.
    public static let valuePayloadSchema: UInt8 = 5
    /// The first protocol version whose chunk acknowledgements name the value
    /// and say how many of its chunks are staged.
    public static let valueProtocol: UInt16 = 5

    /// Encodes the message for a session that negotiated `protocolVersion`:
    /// from 2 on, a batch is columnar (payload schema 2); from 3 on, a batch
    /// or chunk with a stream range is wrapped in payload schema 3; from 4
    /// on, a re-baseline notice with a generation is payload schema 4;
    /// from 5 on, a chunk acknowledgement that names its value is payload
    /// schema 5, and from 7 on one that refuses it schema 7; everything else
    /// is as `frame()` writes it (a notice's generation and an
    /// acknowledgement's value and refusal are left out).
    public func frame(protocolVersion: UInt16) -> Frame {
        if protocolVersion >= SyncMessage.valueProtocol, case .chunkAck(let a) = self, let frame = a.namingValue(protocolVersion: protocolVersion) {
            return frame
        }
        if protocolVersion >= SyncMessage.generationProtocol, case .rebaseline(let r) = self, let generation = r.generation {
            var w = ByteWriter()
            w.writeUInt8(SyncMessage.generationPayloadSchema)
            w.writeVarInt(r.id)
            w.writeUInt64(UInt64(bitPattern: r.purgedThrough))
            w.writeVarInt(UInt64(max(0, generation)))
            return Frame(type: MessageType.rebaseline.rawValue, payload: w.bytes)
        }
        let plain: Frame
        if protocolVersion >= 2, case .batch(let b) = self, ColumnarBatch.canEncode(b.entries) {
            plain = Frame(type: MessageType.batch.rawValue, payload: ColumnarBatch.encode(id: b.id, entries: b.entries))
        } else {
            plain = frame()
        }
        guard protocolVersion >= SyncMessage.receiptProtocol, let range = streamRange else { return plain }
        var w = ByteWriter()
        w.writeUInt8(SyncMessage.rangedPayloadSchema)
        w.writeVarInt(UInt64(clamping: range.lower))
        w.writeVarInt(UInt64(clamping: range.upper))
        w.writeVarInt(UInt64(clamping: range.anchor))
        w.writeRaw(plain.payload)
        return Frame(type: plain.type, payload: w.bytes)
    }

    /// The stream range a batch or chunk carries.
    var streamRange: StreamRange? {
        switch self {
        case .batch(let b): b.range
        case .chunk(let c): c.range
        default: nil
        }
    }

    /// The payload schema a frame announces (its first byte), if it has one.
    public static func payloadSchema(of frame: Frame) -> UInt8? { frame.payload.first }

    /// Encodes the message as a transport frame in payload schema 1 (session protocol 1).
    public func frame() -> Frame {
        var w = ByteWriter()
        w.writeUInt8(SyncMessage.payloadSchema)
        let type: MessageType
        switch self {
        case .hello(let h):
            type = .hello
            w.writeUInt16(h.protocolRange.lowerBound)
            w.writeUInt16(h.protocolRange.upperBound)
            w.writeUInt32(h.node)
            w.writeUInt8(h.role == .phone ? 0 : 1)
            w.writeUInt8(h.isReply ? 1 : 0)
            w.writeString(h.pairingEpoch)
            w.writeBytes(h.registryFingerprint)
            w.writeVarInt(UInt64(h.declarations.count))
            for line in h.declarations { w.writeString(line) }
            w.writeVarInt(UInt64(h.partialTransfers.count))
            for p in h.partialTransfers {
                w.writeString(p.key)
                w.write(p.version)
                w.writeVarInt(UInt64(p.received))
            }
        case .batch(let b):
            type = .batch
            w.writeVarInt(b.id)
            w.writeVarInt(UInt64(b.entries.count))
            for entry in b.entries { w.write(entry) }
        case .ack(let a):
            type = .ack
            w.writeVarInt(a.batchID)
            w.writeVarInt(UInt64(a.applied))
            w.writeVarInt(UInt64(a.rejected.count))
            for r in a.rejected {
                w.writeString(r.key)
                w.writeString(r.code)
            }
        case .chunk(let c):
            type = .chunk
            w.write(c.entry)
            w.writeVarInt(UInt64(c.totalSize))
            w.writeUInt32(c.totalChecksum)
            w.writeVarInt(UInt64(c.index))
            w.writeVarInt(UInt64(c.count))
            w.writeUInt32(c.checksum)
            w.writeBytes(c.bytes)
        case .chunkAck(let a):
            type = .chunkAck
            w.writeString(a.key)
            w.write(a.version)
            w.writeVarInt(UInt64(a.index))
            w.writeUInt8(a.complete ? 1 : 0)
        case .error(let e):
            type = .error
            w.writeString(e.code)
            w.writeString(e.message)
        case .rebaseline(let r):
            type = .rebaseline
            w.writeVarInt(r.id)
            w.writeUInt64(UInt64(bitPattern: r.purgedThrough))
        case .caughtUp(let c):
            type = .caughtUp
            w.writeVarInt(c.id)
        case .manualRequest(let m):
            type = .manualRequest
            w.writeVarInt(m.id)
        case .manualReply(let m):
            type = .manualReply
            w.writeVarInt(m.id)
            w.writeUInt8(m.accepted ? 1 : 0)
            w.writeVarInt(UInt64(m.released))
            w.writeVarInt(m.replyID)
        case .receipt(let receipt):
            type = .receipt
            w.writeVarInt(receipt.id)
            w.writeVarInt(UInt64(clamping: receipt.receivedThrough))
            w.writeVarInt(UInt64(clamping: receipt.receivedAnchor))
            w.writeVarInt(UInt64(clamping: receipt.acknowledgedThrough))
            w.writeVarInt(UInt64(clamping: receipt.acknowledgedAnchor))
        }
        return Frame(type: type.rawValue, payload: w.bytes)
    }

    /// Decodes a frame of either session protocol (a batch in schema 1 or 2,
    /// everything else in schema 1); unknown types, other payload schemas and
    /// malformed payloads throw `.malformedMessage` (the schema is checked first).
    public init(frame: Frame) throws {
        guard let type = MessageType(rawValue: frame.type) else {
            throw SyncError(.malformedMessage, "unknown message type \(frame.type)")
        }
        var r = ByteReader(frame.payload)
        do {
            let schema = try r.readUInt8()
            if schema == SyncMessage.rangedPayloadSchema {
                guard type == .batch || type == .chunk else {
                    throw SyncError(.malformedMessage, "a \(type) message cannot carry a stream range (payload schema \(schema))")
                }
                let lower = try r.readVarInt(), upper = try r.readVarInt(), anchor = try r.readVarInt()
                guard lower < upper, upper <= UInt64(Int64.max) else {
                    throw SyncError(.malformedMessage, "a \(type) message names the stream range \(lower)..<\(upper), which is empty or out of range")
                }
                guard anchor <= UInt64(Int64.max) else { throw SyncError(.malformedMessage, "a \(type) message's range anchor is out of range") }
                let inner = try r.readRaw(count: r.remaining)
                guard let innerSchema = inner.first, innerSchema != SyncMessage.rangedPayloadSchema else {
                    throw SyncError(.malformedMessage, "a ranged \(type) message must wrap a payload of schema 1 or 2")
                }
                let range = StreamRange(lower: Int64(lower), upper: Int64(upper), anchor: Int64(anchor))
                switch try SyncMessage(frame: Frame(type: frame.type, payload: inner)) {
                case .batch(var batch):
                    batch.range = range
                    self = .batch(batch)
                case .chunk(var chunk):
                    chunk.range = range
                    self = .chunk(chunk)
                default:
                    throw SyncError(.malformedMessage, "a ranged \(type) message wraps another type")
                }
                return
            }
            if schema == SyncMessage.generationPayloadSchema {
                guard type == .rebaseline else {
                    throw SyncError(.malformedMessage, "a \(type) message cannot be of payload schema \(schema) (only re-baseline notices are)")
                }
                let id = try r.readVarInt()
                let purgedThrough = Int64(bitPattern: try r.readUInt64())
                let generation = try r.readVarInt()
                guard purgedThrough > 0 else {
                    throw SyncError(.malformedMessage, "a re-baseline notice carries the version \(purgedThrough), out of range")
                }
                guard generation > 0, generation <= UInt64(Int64.max) else {
                    throw SyncError(.malformedMessage, "a re-baseline notice names the generation \(generation), out of range")
                }
                guard r.isAtEnd else { throw SyncError(.malformedMessage, "\(type) message has \(r.remaining) trailing bytes") }
                self = .rebaseline(Rebaseline(id: id, purgedThrough: purgedThrough, generation: Int64(generation)))
                return
            }
            if schema == SyncMessage.valuePayloadSchema || schema == SyncMessage.refusalPayloadSchema {
                self = .chunkAck(try ChunkAck.namingValue(&r, schema: schema, type: type))
                return
            }
            if schema == ColumnarBatch.payloadSchema, type == .batch {
                self = .batch(try ColumnarBatch.decode(&r))
                return
            }
            guard schema == SyncMessage.payloadSchema else {
                throw SyncError(.malformedMessage, "payload schema \(schema) is not supported for a \(type) message (this build speaks \(SyncMessage.payloadSchema), and \(ColumnarBatch.payloadSchema) for batches)")
            }
            switch type {
            case .hello:
                let low = try r.readUInt16(), high = try r.readUInt16()
                guard low <= high else { throw SyncError(.malformedMessage, "hello announces an empty protocol range \(low)...\(high)") }
                let node = try r.readUInt32()
                let roleByte = try r.readUInt8()
                guard roleByte <= 1 else { throw SyncError(.malformedMessage, "hello has an unknown role \(roleByte)") }
                let isReply = try r.readUInt8() != 0
                let epoch = try r.readString(maxLength: 256)
                let fingerprint = try r.readBytes(maxLength: 64)
                var declarations: [String] = []
                for _ in 0..<(try r.readCount()) { declarations.append(try r.readKeyName()) }
                var partials: [PartialTransfer] = []
                for _ in 0..<(try r.readCount()) {
                    partials.append(PartialTransfer(key: try r.readKeyName(), version: try r.readTimestamp(),
                                                    received: Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)))
                }
                self = .hello(Hello(protocolRange: low...high, node: node, role: roleByte == 0 ? .phone : .watch, isReply: isReply,
                                    pairingEpoch: epoch, registryFingerprint: fingerprint, declarations: declarations, partialTransfers: partials))
            case .batch:
                let id = try r.readVarInt()
                var entries: [WireEntry] = []
                for _ in 0..<(try r.readBatchCount()) { entries.append(try r.readEntry()) }
                self = .batch(Batch(id: id, entries: entries))
            case .ack:
                let id = try r.readVarInt()
                let applied = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                var rejected: [Rejection] = []
                for _ in 0..<(try r.readCount()) {
                    rejected.append(Rejection(key: try r.readKeyName(), code: try r.readString(maxLength: 128)))
                }
                self = .ack(Ack(batchID: id, applied: applied, rejected: rejected))
            case .chunk:
                let entry = try r.readEntry()
                let total = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                let totalChecksum = try r.readUInt32()
                let index = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                let count = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                let checksum = try r.readUInt32()
                let bytes = try r.readBytes(maxLength: SyncMessage.maxValueLength)
                guard index < count else { throw SyncError(.malformedMessage, "chunk \(index) of \(count) is out of range") }
                self = .chunk(Chunk(entry: entry, totalSize: total, totalChecksum: totalChecksum, index: index, count: count, checksum: checksum, bytes: bytes))
            case .chunkAck:
                self = .chunkAck(ChunkAck(key: try r.readKeyName(), version: try r.readTimestamp(),
                                          index: Int(clamping: try r.readVarInt() & 0xFFFF_FFFF), complete: try r.readUInt8() != 0))
            case .error:
                self = .error(ErrorMessage(code: try r.readString(maxLength: 128), message: try r.readString(maxLength: 4096)))
            case .rebaseline:
                let id = try r.readVarInt()
                let purgedThrough = Int64(bitPattern: try r.readUInt64())
                guard purgedThrough > 0 else {
                    throw SyncError(.malformedMessage, "a re-baseline notice carries the version \(purgedThrough), out of range")
                }
                self = .rebaseline(Rebaseline(id: id, purgedThrough: purgedThrough))
            case .caughtUp:
                self = .caughtUp(CaughtUp(id: try r.readVarInt()))
            case .manualRequest:
                self = .manualRequest(ManualRequest(id: try r.readVarInt()))
            case .manualReply:
                let id = try r.readVarInt()
                let accepted = try r.readUInt8()
                guard accepted <= 1 else { throw SyncError(.malformedMessage, "a manual reply's accepted flag is \(accepted)") }
                let released = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                guard accepted == 1 || released == 0 else {
                    throw SyncError(.malformedMessage, "a declined manual request cannot have released \(released) entries")
                }
                self = .manualReply(ManualReply(id: id, accepted: accepted == 1, released: released, replyID: try r.readVarInt()))
            case .receipt:
                let id = try r.readVarInt()
                let fields = [try r.readVarInt(), try r.readVarInt(), try r.readVarInt(), try r.readVarInt()]
                guard fields.allSatisfy({ $0 <= UInt64(Int64.max) }) else {
                    throw SyncError(.malformedMessage, "a receipt names stream positions or versions out of range")
                }
                self = .receipt(Receipt(id: id, receivedThrough: Int64(fields[0]), receivedAnchor: Int64(fields[1]),
                                        acknowledgedThrough: Int64(fields[2]), acknowledgedAnchor: Int64(fields[3])))
            }
            guard r.isAtEnd else { throw SyncError(.malformedMessage, "\(type) message has \(r.remaining) trailing bytes") }
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError(.malformedMessage, "malformed \(type) message: \(error)")
        }
    }
}

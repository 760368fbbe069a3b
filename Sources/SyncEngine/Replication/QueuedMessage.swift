import SyncTransport

/// What every queued message carries so that the receiver validates it on
/// its own, without a live handshake: who sent it, under which pairing, in
/// which protocol version, with which key registry.
package struct QueuedHeader: Sendable, Equatable {
    package var protocolVersion: UInt16
    package var node: UInt32
    package var role: DeviceRole
    package var pairingEpoch: String
    package var registryFingerprint: [UInt8]
}

/// The messages of queued delivery (through a `Mailbox`), frame types
/// `0x11...0x15`. A batch names the range of the sender's change stream it
/// covers, `(after, through]`; its acknowledgement names it back, so the
/// sender's cursor for the peer moves only over contiguous, applied ranges.
/// A re-baseline notice goes from a phone ahead of the baseline it posts for
/// a watch it has no cursor for, once it has purged tombstones.
package enum QueuedMessage: Sendable, Equatable {
    case batch(QueuedHeader, after: Int64, through: Int64, entries: [WireEntry])
    case ack(QueuedHeader, after: Int64, through: Int64, applied: Int, rejected: [SyncMessage.Rejection])
    /// A message of ours the peer refused (another registry, protocol or pairing).
    case refusal(QueuedHeader, code: String, message: String)
    /// The phone purged tombstones up to `purgedThrough` (a packed version):
    /// the watch removes what the phone already knew up to it, before the baseline.
    case rebaseline(QueuedHeader, purgedThrough: Int64)
    /// The sender's key declarations (as a live hello carries them), posted
    /// when the registries differ and no session compared them: the receiver
    /// compares them with its own, as a live session does, and answers an
    /// offer (`isAnswer` false) with its own (an answer is never answered).
    case declarations(QueuedHeader, [String], isAnswer: Bool)
    /// From a phone, ahead of a re-baseline notice: the baseline after that
    /// notice ends with a caught-up marker, so the watch keeps what the notice
    /// marked until the marker comes, across mailbox reads. An acknowledgement
    /// frame of a stretch past any stream position (`caughtUpFollowsRange`),
    /// which builds before it pass over.
    case caughtUpFollows(QueuedHeader)
    /// From a phone: everything it had for the watch is posted ahead of this
    /// (its caught-up notice, queued): what a re-baseline notice marked and
    /// the baseline did not bring back goes. An acknowledgement frame of
    /// `caughtUpRange`, which builds before it pass over.
    case caughtUp(QueuedHeader)
    /// From a watch, ahead of anything else it posts: this watch takes a new
    /// node id when its phone refuses its node id (`node-id-conflict`), as a
    /// live watch of protocol 6 does. An acknowledgement frame of
    /// `renewsNodeIDRange`, which builds before it pass over.
    case renewsNodeID(QueuedHeader)

    package enum MessageType: UInt8 {
        case batch = 0x11, ack = 0x12, refusal = 0x13, rebaseline = 0x14, declarations = 0x15
    }

    static let payloadSchema: UInt8 = 1

    /// The stretches that name the markers in an acknowledgement frame
    /// (`0x12`): past any stream position, and other than a repair batch's
    /// `(2^63 - 2, 2^63 - 1]`, so that an acknowledgement of them moves no
    /// cursor in any build.
    static let caughtUpFollowsRange = (after: Int64.max - 3, through: Int64.max - 2)
    static let caughtUpRange = (after: Int64.max - 5, through: Int64.max - 4)
    static let renewsNodeIDRange = (after: Int64.max - 7, through: Int64.max - 6)

    package var header: QueuedHeader {
        switch self {
        case .batch(let h, _, _, _), .ack(let h, _, _, _, _), .refusal(let h, _, _), .rebaseline(let h, _), .declarations(let h, _, _),
             .caughtUpFollows(let h), .caughtUp(let h), .renewsNodeID(let h): h
        }
    }

    /// What the message is, in words (for errors).
    var kindName: String {
        switch self {
        case .batch: "batch"
        case .ack: "acknowledgement"
        case .refusal: "refusal"
        case .rebaseline: "re-baseline notice"
        case .declarations: "key declarations"
        case .caughtUpFollows, .caughtUp: "caught-up marker"
        case .renewsNodeID: "node renewal notice"
        }
    }

    /// A message only a phone sends (a watch refuses it from anyone else).
    var isFromPhoneOnly: Bool {
        switch self {
        case .rebaseline, .caughtUpFollows, .caughtUp: true
        case .batch, .ack, .refusal, .declarations, .renewsNodeID: false
        }
    }

    /// A message only a watch sends, to its phone (a watch sets one aside).
    var isFromWatchOnly: Bool {
        if case .renewsNodeID = self { true } else { false }
    }

    package func frame() -> Frame {
        var w = ByteWriter()
        w.writeUInt8(Self.payloadSchema)
        let h = header
        w.writeUInt16(h.protocolVersion)
        w.writeUInt32(h.node)
        w.writeUInt8(h.role == .phone ? 0 : 1)
        w.writeString(h.pairingEpoch)
        w.writeBytes(h.registryFingerprint)
        let type: MessageType
        switch self {
        case .batch(_, let after, let through, let entries):
            type = .batch
            w.writeUInt64(UInt64(bitPattern: after))
            w.writeUInt64(UInt64(bitPattern: through))
            w.writeVarInt(UInt64(entries.count))
            for entry in entries { w.write(entry) }
        case .ack(_, let after, let through, let applied, let rejected):
            type = .ack
            Self.writeAck(&w, after: after, through: through, applied: applied, rejected: rejected)
        case .caughtUpFollows:
            type = .ack
            Self.writeAck(&w, after: Self.caughtUpFollowsRange.after, through: Self.caughtUpFollowsRange.through, applied: 0, rejected: [])
        case .caughtUp:
            type = .ack
            Self.writeAck(&w, after: Self.caughtUpRange.after, through: Self.caughtUpRange.through, applied: 0, rejected: [])
        case .renewsNodeID:
            type = .ack
            Self.writeAck(&w, after: Self.renewsNodeIDRange.after, through: Self.renewsNodeIDRange.through, applied: 0, rejected: [])
        case .refusal(_, let code, let message):
            type = .refusal
            w.writeString(code)
            w.writeString(message)
        case .rebaseline(_, let purgedThrough):
            type = .rebaseline
            w.writeUInt64(UInt64(bitPattern: purgedThrough))
        case .declarations(_, let lines, let isAnswer):
            type = .declarations
            w.writeUInt8(isAnswer ? 1 : 0)
            w.writeVarInt(UInt64(lines.count))
            for line in lines { w.writeString(line) }
        }
        return Frame(type: type.rawValue, payload: w.bytes)
    }

    private static func writeAck(_ w: inout ByteWriter, after: Int64, through: Int64, applied: Int, rejected: [SyncMessage.Rejection]) {
        w.writeUInt64(UInt64(bitPattern: after))
        w.writeUInt64(UInt64(bitPattern: through))
        w.writeVarInt(UInt64(applied))
        w.writeVarInt(UInt64(rejected.count))
        for r in rejected {
            w.writeString(r.key)
            w.writeString(r.code)
        }
    }

    /// Decodes a queued message; anything else throws `.malformedMessage`.
    package init(frame: Frame) throws {
        guard let type = MessageType(rawValue: frame.type) else {
            throw SyncError(.malformedMessage, "frame type \(frame.type) is not a queued message")
        }
        var r = ByteReader(frame.payload)
        do {
            let schema = try r.readUInt8()
            guard schema == Self.payloadSchema else {
                throw SyncError(.malformedMessage, "queued payload schema \(schema) is not supported (this build speaks \(Self.payloadSchema))")
            }
            let version = try r.readUInt16()
            let node = try r.readUInt32()
            let roleByte = try r.readUInt8()
            guard roleByte <= 1 else { throw SyncError(.malformedMessage, "a queued message names an unknown role \(roleByte)") }
            let header = QueuedHeader(protocolVersion: version, node: node, role: roleByte == 0 ? .phone : .watch,
                                      pairingEpoch: try r.readString(maxLength: 256), registryFingerprint: try r.readBytes(maxLength: 64))
            switch type {
            case .batch:
                let after = Int64(bitPattern: try r.readUInt64()), through = Int64(bitPattern: try r.readUInt64())
                guard after >= 0, through > after else { throw SyncError(.malformedMessage, "a queued batch covers an empty range \(after)...\(through)") }
                var entries: [WireEntry] = []
                for _ in 0..<(try r.readBatchCount()) { entries.append(try r.readEntry()) }
                self = .batch(header, after: after, through: through, entries: entries)
            case .ack:
                let after = Int64(bitPattern: try r.readUInt64()), through = Int64(bitPattern: try r.readUInt64())
                guard after >= 0, through > after else { throw SyncError(.malformedMessage, "a queued acknowledgement covers an empty range \(after)...\(through)") }
                let applied = Int(clamping: try r.readVarInt() & 0xFFFF_FFFF)
                var rejected: [SyncMessage.Rejection] = []
                for _ in 0..<(try r.readCount()) {
                    rejected.append(SyncMessage.Rejection(key: try r.readKeyName(), code: try r.readString(maxLength: 128)))
                }
                let markers = [(Self.caughtUpFollowsRange, QueuedMessage.caughtUpFollows(header)), (Self.caughtUpRange, .caughtUp(header)),
                               (Self.renewsNodeIDRange, .renewsNodeID(header))]
                if let marker = markers.first(where: { $0.0 == (after, through) })?.1 {
                    guard applied == 0, rejected.isEmpty else {
                        throw SyncError(.malformedMessage, "a queued \(marker.kindName) names \(applied) applied entries and \(rejected.count) rejections")
                    }
                    self = marker
                } else {
                    self = .ack(header, after: after, through: through, applied: applied, rejected: rejected)
                }
            case .refusal:
                self = .refusal(header, code: try r.readString(maxLength: 128), message: try r.readString(maxLength: 4096))
            case .rebaseline:
                let purgedThrough = Int64(bitPattern: try r.readUInt64())
                guard purgedThrough > 0 else { throw SyncError(.malformedMessage, "a queued re-baseline notice names no purged version (\(purgedThrough))") }
                self = .rebaseline(header, purgedThrough: purgedThrough)
            case .declarations:
                let answer = try r.readUInt8()
                guard answer <= 1 else { throw SyncError(.malformedMessage, "queued key declarations name an unknown kind \(answer)") }
                var lines: [String] = []
                for _ in 0..<(try r.readCount()) { lines.append(try r.readKeyName()) }
                guard KeyRegistry.fingerprint(of: lines) == header.registryFingerprint else {
                    throw SyncError(.malformedMessage, "queued key declarations do not match the registry fingerprint they came with")
                }
                self = .declarations(header, lines, isAnswer: answer == 1)
            }
            guard r.isAtEnd else { throw SyncError(.malformedMessage, "a queued \(type) message has \(r.remaining) trailing bytes") }
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError(.malformedMessage, "malformed queued \(type) message: \(error)")
        }
    }
}

/// How a queued batch names positions of its sender's change stream (and its
/// acknowledgement names them back): the position, with the sender's
/// re-baseline generation for that peer in bits 48–61. A phone starts a new
/// generation with each re-baseline notice for a watch, which removes on the
/// watch what the phone's earlier messages brought; an acknowledgement of a
/// batch of an earlier generation then moves no cursor (the baseline comes
/// again). Generation 0, a watch's always, is the plain position, as
/// builds before generations wrote them.
package enum QueuedStreamPosition {
    static let generationShift: Int64 = 48
    /// Generations are told apart modulo this (an acknowledgement 16,384
    /// re-baselines old is taken as current).
    static let generations: Int64 = 1 << 14
    /// Stream positions this coding carries (change sequence numbers stay far below).
    static let positionLimit: Int64 = 1 << 48

    /// `position` named in `generation`.
    static func coded(_ position: Int64, generation: Int64) throws -> Int64 {
        guard position >= 0, position < positionLimit else {
            throw SyncError(.database, "stream position \(position) is past what a queued batch can name (\(positionLimit))")
        }
        return (generation % generations) << generationShift | position
    }

    /// Whether `coded` is of a generation before `generation` (told apart
    /// modulo `generations`: up to half of them back).
    static func isOfOlderGeneration(_ coded: Int64, than generation: Int64) -> Bool {
        guard coded >= 0 else { return false }
        let back = ((generation - coded >> generationShift) % generations + generations) % generations
        return back > 0 && back < generations / 2
    }

    /// The stream position `coded` names when it is of `generation`, else nil.
    static func position(_ coded: Int64, generation: Int64) -> Int64? {
        guard coded >= 0, coded >> generationShift == generation % generations else { return nil }
        return coded & (positionLimit - 1)
    }
}

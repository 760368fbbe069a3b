import SyncTransport

/// One row of `sync_commit_log`: what a write transaction changed, for the
/// other processes that share the store file (`SharedFileState`).
///
/// Two formats, named by the row's `format` column:
///
/// - **1** (schema ≤ 11, and builds of then still writing): varint change
///   sequence high mark, UInt64 clock, varint count, then per change the key
///   (varint length + UTF-8), UInt8 kind (0 set, 1 removed), UInt8 origin
///   (0 local, 1 remote), UInt64 packed version, UInt32 node: 27 bytes for a
///   12-byte key.
/// - **2** (schema 12): the same header, then per change a flag byte (bit 0
///   removed, bit 1 remote, bit 2 a node follows: it differs from the
///   previous change's, the first change's from 0), a varint of the key's
///   leading bytes it shares with the previous key, the rest of the key
///   (varint length + bytes), the version's packed time minus the previous
///   change's (zigzag varint; the first minus 0) and, when flagged, its
///   UInt32 node. A transaction's changes are mostly keys of one family
///   with consecutive versions of one node: 5–7 bytes each.
struct CommitLogRecord: Equatable {
    var sequenceHigh: Int64
    var clockLatest: Int64
    var changes: [StoreChange]

    /// The format `encoded()` writes.
    static let currentFormat = 2
    /// Keys longer than this are refused when decoding (a damaged row).
    static let maxKeyBytes = 4096
    /// Changes a row may claim; more is a damaged row.
    static let maxChanges = 1_000_000

    private static let removedFlag: UInt8 = 1, remoteFlag: UInt8 = 2, nodeFlag: UInt8 = 4

    /// The record in `currentFormat`.
    func encoded() -> [UInt8] {
        var writer = ByteWriter(reservingCapacity: 32 + changes.count * 8)
        writer.writeVarInt(UInt64(max(sequenceHigh, 0)))
        writer.writeUInt64(UInt64(bitPattern: clockLatest))
        writer.writeVarInt(UInt64(changes.count))
        // The previous key's bytes, in one buffer reused for every change: no
        // allocation per change (a transaction of a large batch writes thousands).
        var previousKey: [UInt8] = []
        previousKey.reserveCapacity(64)
        var previousTime: Int64 = 0
        var previousNode: UInt32 = 0
        for change in changes {
            var name = change.key
            name.withUTF8 { key in
                var shared = 0
                let common = min(key.count, previousKey.count)
                while shared < common, key[shared] == previousKey[shared] { shared += 1 }
                let nodeDiffers = change.version.node != previousNode
                var flags: UInt8 = change.kind == .removed ? Self.removedFlag : 0
                if change.origin == .remote { flags |= Self.remoteFlag }
                if nodeDiffers { flags |= Self.nodeFlag }
                writer.writeUInt8(flags)
                writer.writeVarInt(UInt64(shared))
                writer.writeVarInt(UInt64(key.count - shared))
                writer.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: key[shared...]))
                writer.writeVarInt(ColumnarBatch.zigzag(change.version.packed &- previousTime))
                if nodeDiffers { writer.writeUInt32(change.version.node) }
                previousKey.removeAll(keepingCapacity: true)
                previousKey.append(contentsOf: key)
            }
            previousTime = change.version.packed
            previousNode = change.version.node
        }
        return writer.bytes
    }

    /// Reads a row written in `format`; a row that does not decode, or of a
    /// format this build does not know, throws.
    init(_ bytes: [UInt8], format: Int) throws {
        var reader = ByteReader(bytes)
        sequenceHigh = Int64(bitPattern: try reader.readVarInt())
        clockLatest = Int64(bitPattern: try reader.readUInt64())
        let count = try reader.readVarInt()
        guard count <= UInt64(Self.maxChanges) else { throw SyncError(.database, "a commit log row claims \(count) changes") }
        changes = []
        changes.reserveCapacity(min(Int(count), bytes.count / 5))
        switch format {
        case 1:
            for _ in 0..<count {
                let key = try reader.readString(maxLength: Self.maxKeyBytes)
                let kind: StoreChange.Kind = try reader.readUInt8() == 0 ? .set : .removed
                let origin: StoreChange.Origin = try reader.readUInt8() == 0 ? .local : .remote
                let packed = Int64(bitPattern: try reader.readUInt64())
                let node = try reader.readUInt32()
                changes.append(StoreChange(key: key, kind: kind, origin: origin, version: HLCTimestamp(packed: packed, node: node),
                                           isFromAnotherProcess: true))
            }
        case 2:
            var previousKey: [UInt8] = []
            var previousTime: Int64 = 0
            var previousNode: UInt32 = 0
            for _ in 0..<count {
                let flags = try reader.readUInt8()
                let shared = try reader.readVarInt()
                guard shared <= UInt64(previousKey.count) else { throw SyncError(.database, "a commit log key shares more than the previous key") }
                let rest = try reader.readBytes(maxLength: Self.maxKeyBytes - Int(shared))
                let key = Array(previousKey[..<Int(shared)]) + rest
                guard let name = String(validating: key, as: UTF8.self) else { throw SyncError(.database, "a commit log key is not UTF-8") }
                let time = previousTime &+ ColumnarBatch.unzigzag(try reader.readVarInt())
                let node = flags & Self.nodeFlag != 0 ? try reader.readUInt32() : previousNode
                changes.append(StoreChange(key: name, kind: flags & Self.removedFlag != 0 ? .removed : .set,
                                           origin: flags & Self.remoteFlag != 0 ? .remote : .local,
                                           version: HLCTimestamp(packed: time, node: node), isFromAnotherProcess: true))
                previousKey = key
                previousTime = time
                previousNode = node
            }
        default:
            throw SyncError(.database, "a commit log row of format \(format), newer than this build reads")
        }
        guard reader.isAtEnd else { throw SyncError(.database, "a commit log row has bytes after its changes") }
    }

    init(sequenceHigh: Int64, clockLatest: Int64, changes: [StoreChange]) {
        self.sequenceHigh = sequenceHigh
        self.clockLatest = clockLatest
        self.changes = changes
    }
}

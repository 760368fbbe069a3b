import SyncTransport

/// The batch payload of session protocol 2 (payload schema 2): the entries
/// as columns, so that deflate sees like with like. Byte by byte in
/// `Fixtures/wire/README.md`.
///
/// After the schema byte, the batch id and the entry count (varints), ten
/// columns follow in a fixed order, each a varint byte length and then its
/// bytes; a column must be consumed exactly:
///
/// 1. nodes: a varint count, then that many node ids (UInt32 big-endian);
///    versions and bases name their node by its index here.
/// 2. encodings: a varint count, then that many strings (at most 64 bytes).
/// 3. keys: per entry, the number of leading UTF-8 bytes it shares with the
///    previous key (varint), then the rest (varint length, bytes).
/// 4. flags: one byte per entry: bit 0 deleted, bits 1–2 how the base is
///    sent (0: the zero version, nothing sent; 1: equal to the entry's
///    version, nothing sent; 2: in the base columns); other bits are 0.
/// 5. encoding indexes: a varint per entry.
/// 6. version times: per entry, the packed (time, counter) minus the
///    previous entry's (the first minus 0), zigzag varint.
/// 7. version nodes: a varint node index per entry.
/// 8. base times: per entry whose base is sent, its packed value minus the
///    previous sent base's (the first minus its own entry's version), zigzag varint.
/// 9. base nodes: a varint node index per entry whose base is sent.
/// 10. values: per live entry its length (varint), then, after the lengths of
///     all of them, the values concatenated (their lengths add up to the rest of the column).
enum ColumnarBatch {
    /// The payload schema of a columnar batch.
    static let payloadSchema: UInt8 = 2
    /// Base kinds in the flags column.
    static let baseIsZero: UInt8 = 0
    static let baseIsVersion: UInt8 = 1
    static let baseIsSent: UInt8 = 2
    static let deletedFlag: UInt8 = 1
    /// Key bytes a batch may rebuild at most (prefix coding lets a few wire
    /// bytes name a long key; this bounds what a batch can make us allocate).
    static let maxTotalKeyBytes = 8 * 1024 * 1024

    /// Whether `entries` can be written as columns: every version and base is
    /// at or after the zero version (what a clock issues). Otherwise the batch
    /// goes in schema 1, which any peer decodes.
    static func canEncode(_ entries: [WireEntry]) -> Bool {
        entries.allSatisfy { $0.version.packed >= 0 && $0.base.packed >= 0 }
    }

    /// Writes the payload (schema byte included); `canEncode(entries)` must hold.
    static func encode(id: UInt64, entries: [WireEntry]) -> [UInt8] {
        var nodes: [UInt32] = []
        var nodeIndex: [UInt32: Int] = [:]
        func index(of node: UInt32) -> UInt64 {
            if let known = nodeIndex[node] { return UInt64(known) }
            nodeIndex[node] = nodes.count
            nodes.append(node)
            return UInt64(nodes.count - 1)
        }
        var encodings: [String] = []
        var encodingIndex: [String: Int] = [:]

        var keys = ByteWriter(), flags = ByteWriter(), encodingColumn = ByteWriter()
        var versionTimes = ByteWriter(), versionNodes = ByteWriter(), baseTimes = ByteWriter(), baseNodes = ByteWriter()
        var valueLengths = ByteWriter()
        var valueBytes = 0
        var previousKey: [UInt8] = []
        var previousVersion: Int64 = 0
        var previousBase: Int64?
        for entry in entries {
            let key = Array(entry.key.utf8)
            var shared = 0
            while shared < key.count, shared < previousKey.count, key[shared] == previousKey[shared] { shared += 1 }
            keys.writeVarInt(UInt64(shared))
            keys.writeBytes(Array(key[shared...]))
            previousKey = key

            let baseKind: UInt8 = entry.base == .zero ? baseIsZero : entry.base == entry.version ? baseIsVersion : baseIsSent
            flags.writeUInt8((entry.deleted ? deletedFlag : 0) | baseKind << 1)

            let encoding: Int
            if let known = encodingIndex[entry.encoding] {
                encoding = known
            } else {
                encoding = encodings.count
                encodingIndex[entry.encoding] = encoding
                encodings.append(entry.encoding)
            }
            encodingColumn.writeVarInt(UInt64(encoding))

            versionTimes.writeVarInt(zigzag(entry.version.packed - previousVersion))
            previousVersion = entry.version.packed
            versionNodes.writeVarInt(index(of: entry.version.node))
            if baseKind == baseIsSent {
                baseTimes.writeVarInt(zigzag(entry.base.packed - (previousBase ?? entry.version.packed)))
                previousBase = entry.base.packed
                baseNodes.writeVarInt(index(of: entry.base.node))
            }
            if !entry.deleted {
                let count = entry.value?.count ?? 0
                valueLengths.writeVarInt(UInt64(count))
                valueBytes += count
            }
        }
        var nodeColumn = ByteWriter()
        nodeColumn.writeVarInt(UInt64(nodes.count))
        for node in nodes { nodeColumn.writeUInt32(node) }
        var encodingTable = ByteWriter()
        encodingTable.writeVarInt(UInt64(encodings.count))
        for encoding in encodings { encodingTable.writeString(encoding) }

        var values = ByteWriter(reservingCapacity: valueLengths.bytes.count + valueBytes)
        values.writeRaw(valueLengths.bytes)
        for entry in entries where !entry.deleted { values.writeRaw(entry.value ?? []) }

        let columns = [nodeColumn, encodingTable, keys, flags, encodingColumn, versionTimes, versionNodes, baseTimes, baseNodes, values]
        var w = ByteWriter(reservingCapacity: 24 + columns.reduce(0) { $0 + $1.bytes.count + 5 })
        w.writeUInt8(payloadSchema)
        w.writeVarInt(id)
        w.writeVarInt(UInt64(entries.count))
        for column in columns { w.writeBytes(column.bytes) }
        return w.bytes
    }

    /// Reads the payload after its schema byte. Everything is bounded by the
    /// payload: a malformed batch throws `.malformedMessage`, never traps.
    static func decode(_ r: inout ByteReader) throws -> SyncMessage.Batch {
        let id = try r.readVarInt()
        let count = try r.readVarInt()
        // Every entry takes at least a byte in the keys, flags, encodings, version times and version nodes columns.
        guard count <= UInt64(SyncMessage.maxCount), count.multipliedReportingOverflow(by: 5).partialValue <= UInt64(r.remaining),
              count <= UInt64(r.remaining) else {
            throw SyncError(.malformedMessage, "a columnar batch announces \(count) entries, more than its \(r.remaining) bytes can hold")
        }
        // No sender puts more in a batch: refused before anything is allocated for them.
        guard count <= UInt64(SyncMessage.maxBatchEntries) else {
            throw SyncError(.malformedMessage, "a columnar batch announces \(count) entries, more than the \(SyncMessage.maxBatchEntries) a batch may hold")
        }
        let n = Int(count)
        func column(_ name: String) throws -> ByteReader {
            let length = try r.readVarInt()
            guard length <= UInt64(r.remaining) else {
                throw SyncError(.malformedMessage, "the \(name) column of a columnar batch announces \(length) bytes, only \(r.remaining) remain")
            }
            return ByteReader(try r.readRaw(count: Int(length)))
        }
        func finish(_ reader: ByteReader, _ name: String) throws {
            guard reader.isAtEnd else {
                throw SyncError(.malformedMessage, "the \(name) column of a columnar batch has \(reader.remaining) bytes left over")
            }
        }
        func smallCount(_ reader: inout ByteReader, limit: Int, _ name: String) throws -> Int {
            let value = try reader.readVarInt()
            guard value <= UInt64(limit) else {
                throw SyncError(.malformedMessage, "the \(name) column of a columnar batch has \(value) items, at most \(limit) are possible")
            }
            return Int(value)
        }

        var nodeColumn = try column("nodes")
        let nodeCount = try smallCount(&nodeColumn, limit: min(2 * n, nodeColumn.remaining / 4), "nodes")
        var nodes: [UInt32] = []
        nodes.reserveCapacity(nodeCount)
        for _ in 0..<nodeCount { nodes.append(try nodeColumn.readUInt32()) }
        try finish(nodeColumn, "nodes")

        var encodingTable = try column("encodings")
        let encodingCount = try smallCount(&encodingTable, limit: min(n, encodingTable.remaining), "encodings")
        var encodings: [String] = []
        for _ in 0..<encodingCount { encodings.append(try encodingTable.readString(maxLength: SyncMessage.maxEncodingLength)) }
        try finish(encodingTable, "encodings")

        var keyColumn = try column("keys")
        var keys: [String] = []
        // Each key takes at least two bytes of its column (the shared length, the rest's length).
        keys.reserveCapacity(min(n, keyColumn.remaining / 2))
        var previousKey: [UInt8] = []
        var totalKeyBytes = 0
        for i in 0..<n {
            let shared = try keyColumn.readVarInt()
            guard shared <= UInt64(previousKey.count) else {
                throw SyncError(.malformedMessage, "entry \(i) of a columnar batch shares \(shared) bytes with a previous key of \(previousKey.count)")
            }
            let suffix = try keyColumn.readBytes(maxLength: SyncMessage.maxNameLength)
            guard Int(shared) + suffix.count <= SyncMessage.maxNameLength else {
                throw SyncError(.malformedMessage, "entry \(i) of a columnar batch has a key of \(Int(shared) + suffix.count) bytes, over the \(SyncMessage.maxNameLength)-byte limit")
            }
            var key = Array(previousKey.prefix(Int(shared)))
            key += suffix
            totalKeyBytes += key.count
            guard totalKeyBytes <= maxTotalKeyBytes else {
                throw SyncError(.malformedMessage, "the keys of a columnar batch add up to more than \(maxTotalKeyBytes) bytes")
            }
            guard let text = String(validating: key, as: UTF8.self) else {
                throw SyncError(.malformedMessage, "entry \(i) of a columnar batch has a key that is not valid UTF-8")
            }
            keys.append(try KeyName.canonicalFromPeer(text))
            previousKey = key
        }
        try finish(keyColumn, "keys")

        var flagReader = try column("flags")
        guard flagReader.remaining == n else {
            throw SyncError(.malformedMessage, "the flags column of a columnar batch has \(flagReader.remaining) bytes for \(n) entries")
        }
        let flagColumn = try flagReader.readRaw(count: n)
        for (i, flag) in flagColumn.enumerated() where flag & ~0b111 != 0 || flag >> 1 > baseIsSent {
            throw SyncError(.malformedMessage, "entry \(i) of a columnar batch has undefined flags \(flag)")
        }

        var encodingColumn = try column("encoding indexes")
        var versionTimes = try column("version times")
        var versionNodes = try column("version nodes")
        var baseTimes = try column("base times")
        var baseNodes = try column("base nodes")
        var values = try column("values")
        guard r.isAtEnd else { throw SyncError(.malformedMessage, "a columnar batch has \(r.remaining) trailing bytes") }

        func node(_ reader: inout ByteReader, _ i: Int) throws -> UInt32 {
            let index = try reader.readVarInt()
            guard index < UInt64(nodes.count) else {
                throw SyncError(.malformedMessage, "entry \(i) of a columnar batch names node \(index) of \(nodes.count)")
            }
            return nodes[Int(index)]
        }
        func add(_ previous: Int64, _ delta: UInt64, _ i: Int, _ what: String) throws -> Int64 {
            let (sum, overflow) = previous.addingReportingOverflow(unzigzag(delta))
            guard !overflow, sum >= 0 else {
                throw SyncError(.malformedMessage, "the \(what) of entry \(i) of a columnar batch is out of range (its delta overflows or goes below zero)")
            }
            return sum
        }

        var live = 0
        for flag in flagColumn where flag & deletedFlag == 0 { live += 1 }
        var lengths: [Int] = []
        lengths.reserveCapacity(live)
        var valueTotal = 0
        for i in 0..<live {
            let length = try values.readVarInt()
            guard length <= UInt64(SyncMessage.maxValueLength), length <= UInt64(values.remaining) else {
                throw SyncError(.malformedMessage, "value \(i) of a columnar batch announces \(length) bytes, more than the batch holds")
            }
            lengths.append(Int(length))
            valueTotal += Int(length)
        }
        guard valueTotal == values.remaining else {
            throw SyncError(.malformedMessage, "the values of a columnar batch add up to \(valueTotal) bytes, the column holds \(values.remaining)")
        }

        var entries: [WireEntry] = []
        entries.reserveCapacity(n)
        var previousVersion: Int64 = 0
        var previousBase: Int64?
        var nextValue = 0
        for i in 0..<n {
            let flag = flagColumn[i]
            let encoding = try encodingColumn.readVarInt()
            guard encoding < UInt64(encodings.count) else {
                throw SyncError(.malformedMessage, "entry \(i) of a columnar batch names encoding \(encoding) of \(encodings.count)")
            }
            let packed = try add(previousVersion, try versionTimes.readVarInt(), i, "version")
            previousVersion = packed
            let version = HLCTimestamp(packed: packed, node: try node(&versionNodes, i))
            let base: HLCTimestamp
            switch flag >> 1 {
            case baseIsZero: base = .zero
            case baseIsVersion: base = version
            default:
                guard !baseTimes.isAtEnd, !baseNodes.isAtEnd else {
                    throw SyncError(.malformedMessage, "entry \(i) of a columnar batch has a base to read, but the base columns are exhausted")
                }
                let basePacked = try add(previousBase ?? packed, try baseTimes.readVarInt(), i, "base")
                previousBase = basePacked
                base = HLCTimestamp(packed: basePacked, node: try node(&baseNodes, i))
            }
            let deleted = flag & deletedFlag != 0
            var value: [UInt8]?
            if !deleted {
                value = try values.readRaw(count: lengths[nextValue])
                nextValue += 1
            }
            entries.append(WireEntry(key: keys[i], version: version, base: base, deleted: deleted,
                                     encoding: encodings[Int(encoding)], value: value))
        }
        try finish(encodingColumn, "encoding indexes")
        try finish(versionTimes, "version times")
        try finish(versionNodes, "version nodes")
        try finish(baseTimes, "base times")
        try finish(baseNodes, "base nodes")
        try finish(values, "values")
        return SyncMessage.Batch(id: id, entries: entries)
    }

    static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value << 1) ^ (value >> 63))
    }

    static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }
}

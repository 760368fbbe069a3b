import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// The columnar batch of session protocol 2 (`ColumnarBatch`): what it
/// carries comes back exactly, it deflates smaller than protocol 1, and a
/// malformed one is refused with `malformed-message`, never a trap.
@Suite struct ColumnarBatchTests {
    static let v = HLCTimestamp(physicalMilliseconds: 1_763_800_000_000, counter: 3, node: 0x1001)
    static let base = HLCTimestamp(physicalMilliseconds: 1_763_799_000_000, counter: 0, node: 0x2002)

    /// Entries that use every column: deletes, the three kinds of base, two
    /// nodes, two encodings, keys sharing prefixes (one cut inside a
    /// multi-byte character), an empty value, a long one.
    static let mixed: [WireEntry] = [
        WireEntry(key: "health:daily:steps", version: v, base: base, deleted: false, encoding: "json", value: Array("1234".utf8)),
        WireEntry(key: "health:daily:sleep", version: HLCTimestamp(packed: v.packed + 7, node: 0x2002), base: .zero, deleted: true,
                  encoding: "json", value: nil),
        WireEntry(key: "health:daily:sléep", version: HLCTimestamp(packed: v.packed - 70_000, node: 0x1001),
                  base: HLCTimestamp(packed: v.packed - 70_000, node: 0x1001), deleted: false, encoding: "data", value: []),
        WireEntry(key: "health:daily:slêep", version: v, base: HLCTimestamp(packed: base.packed + 1, node: 0x1001), deleted: false,
                  encoding: "json", value: Array(repeating: 0x41, count: 3_000)),
        WireEntry(key: "a", version: HLCTimestamp(packed: 0, node: 0), base: .zero, deleted: false, encoding: "json", value: Array("0".utf8)),
        WireEntry(key: "profile:name", version: HLCTimestamp(packed: HLCTimestamp.maxPacked, node: .max), base: base, deleted: true,
                  encoding: "json", value: nil),
    ]

    /// `count` entries of one family, as an app writes them in one transaction.
    static func family(_ count: Int, changed: Bool = false) -> [WireEntry] {
        (0..<count).map { i in
            let version = HLCTimestamp(packed: v.packed + Int64(i) * 3 + (changed ? 1 << 30 : 0), node: 0x1001)
            let base = changed ? HLCTimestamp(packed: v.packed + Int64(i) * 3, node: 0x1001) : .zero
            let value = "{\"bpm\":\(60 + i % 40),\"note\":\"resting heart rate measured on the watch\",\"zone\":\(i % 5)}"
            return WireEntry(key: "health:heart:sample-\(i)", version: version, base: base, deleted: false, encoding: "json",
                             value: Array(value.utf8))
        }
    }

    /// Normalized the way both protocols carry it: a live entry's missing value is empty, a delete has none.
    static func carried(_ entries: [WireEntry]) -> [WireEntry] {
        entries.map { entry in
            var copy = entry
            copy.value = entry.deleted ? nil : (entry.value ?? [])
            return copy
        }
    }

    @Test(arguments: [0, 1, 2, 6, 500])
    func entriesComeBackExactly(count: Int) throws {
        let entries = count == 6 ? Self.mixed : Self.family(count, changed: count % 2 == 0)
        let message = SyncMessage.batch(.init(id: 41, entries: entries))
        let frame = message.frame(protocolVersion: 2)
        #expect(frame.type == SyncMessage.MessageType.batch.rawValue)
        #expect(frame.payload.first == ColumnarBatch.payloadSchema)
        #expect(try SyncMessage(frame: frame) == .batch(.init(id: 41, entries: Self.carried(entries))))
        // Through the codec (compressed when that pays off), and protocol 1 still as before.
        let codec = FrameCodec()
        #expect(try SyncMessage(frame: codec.decode(codec.encode(frame))) == .batch(.init(id: 41, entries: Self.carried(entries))))
        #expect(message.frame(protocolVersion: 1) == message.frame())
        #expect(message.frame(protocolVersion: 1).payload.first == SyncMessage.payloadSchema)
    }

    /// Only batches change in protocol 2.
    @Test func otherMessagesAreTheSameInBothProtocols() throws {
        for (_, message) in WireGoldenTests.messages {
            if case .batch = message { continue }
            #expect(message.frame(protocolVersion: 2) == message.frame())
        }
    }

    /// A version before the zero version cannot be delta-coded as a column:
    /// such a batch goes in schema 1, which every peer decodes.
    @Test func aBatchWithANegativeVersionFallsBackToSchemaOne() throws {
        let entries = [WireEntry(key: "k", version: HLCTimestamp(packed: -5, node: 1), base: .zero, deleted: false, encoding: "json", value: [1])]
        let frame = SyncMessage.batch(.init(id: 1, entries: entries)).frame(protocolVersion: 2)
        #expect(frame.payload.first == SyncMessage.payloadSchema)
        #expect(try SyncMessage(frame: frame) == .batch(.init(id: 1, entries: entries)))
    }

    /// What the columns are for: once deflated, a batch of one family's
    /// entries is smaller in protocol 2 than in protocol 1, both for new keys
    /// and for changed ones (whose bases are sent).
    @Test(arguments: [false, true])
    func columnsDeflateSmallerThanRows(changed: Bool) throws {
        let message = SyncMessage.batch(.init(id: 9, entries: Self.family(2_000, changed: changed)))
        let v1 = try Compression.deflate(message.frame().payload, level: 5).count
        let v2 = try Compression.deflate(message.frame(protocolVersion: 2).payload, level: 5).count
        #expect(Double(v2) < Double(v1) * 0.9, "protocol 1: \(v1) bytes, protocol 2: \(v2) bytes")
    }

    // MARK: - Malformed batches

    /// A schema-2 batch payload from raw parts: id, count, then the ten columns.
    static func payload(count: UInt64, columns: [[UInt8]]) -> [UInt8] {
        var w = ByteWriter()
        w.writeUInt8(2)
        w.writeVarInt(7)
        w.writeVarInt(count)
        for column in columns { w.writeBytes(column) }
        return w.bytes
    }

    static func varints(_ values: [UInt64]) -> [UInt8] {
        var w = ByteWriter()
        for value in values { w.writeVarInt(value) }
        return w.bytes
    }

    /// One valid entry ("ab", version 5 on node 9, live, value "x") as columns, then changed by `change`.
    static func oneEntry(_ change: (inout [[UInt8]]) -> Void = { _ in }) -> [UInt8] {
        var nodes = ByteWriter()
        nodes.writeVarInt(1)
        nodes.writeUInt32(9)
        var encodings = ByteWriter()
        encodings.writeVarInt(1)
        encodings.writeString("json")
        var columns: [[UInt8]] = [
            nodes.bytes, encodings.bytes, [0, 2] + Array("ab".utf8), [0], [0], varints([10]), [0], [], [], [1] + Array("x".utf8),
        ]
        change(&columns)
        return payload(count: 1, columns: columns)
    }

    /// The malformed columnar batches of `Fixtures/wire/fail-cases/engine-v2-*.bin`, by name.
    static let malformed: [(String, [UInt8])] = [
        ("too-many-entries", payload(count: 1_000_000, columns: Array(repeating: [], count: 10))),
        ("count-beyond-payload", { var p = oneEntry(); p[2] = 40; return p }()),
        ("column-longer-than-payload", Array(oneEntry().prefix(12)) + [0x7F]),
        ("column-left-over-bytes", oneEntry { $0[4] = [0, 0] }),
        ("flags-column-short", oneEntry { $0[3] = [] }),
        ("undefined-flags", oneEntry { $0[3] = [0b1000] }),
        ("undefined-base-kind", oneEntry { $0[3] = [0b110] }),
        ("prefix-longer-than-previous-key", oneEntry { $0[2] = [3, 2] + Array("ab".utf8) }),
        ("key-over-limit", {
            var nodes = ByteWriter()
            nodes.writeVarInt(1)
            nodes.writeUInt32(9)
            var encodings = ByteWriter()
            encodings.writeVarInt(1)
            encodings.writeString("json")
            let long = Array(repeating: UInt8(0x6B), count: 1_000)
            var keys = ByteWriter()
            keys.writeVarInt(0)
            keys.writeBytes(long)
            keys.writeVarInt(1_000)
            keys.writeBytes(Array(repeating: 0x6B, count: 100))
            return payload(count: 2, columns: [nodes.bytes, encodings.bytes, keys.bytes, [0, 0], [0, 0], varints([10, 1]), [0, 0], [], [],
                                               [0, 0]])
        }()),
        ("key-not-utf8", oneEntry { $0[2] = [0, 2, 0xC3, 0x28] }),
        ("version-delta-overflow", {
            var nodes = ByteWriter()
            nodes.writeVarInt(1)
            nodes.writeUInt32(9)
            var encodings = ByteWriter()
            encodings.writeVarInt(1)
            encodings.writeString("json")
            return payload(count: 2, columns: [nodes.bytes, encodings.bytes, [0, 1, 0x61, 0, 1, 0x62], [0, 0], [0, 0],
                                               varints([ColumnarBatch.zigzag(Int64.max), ColumnarBatch.zigzag(1)]), [0, 0], [], [], [0, 0]])
        }()),
        ("version-negative", oneEntry { $0[5] = varints([ColumnarBatch.zigzag(-1)]) }),
        ("base-delta-overflow", oneEntry {
            $0[3] = [ColumnarBatch.baseIsSent << 1]
            $0[7] = varints([ColumnarBatch.zigzag(Int64.max)])
            $0[8] = [0]
        }),
        ("base-missing", oneEntry { $0[3] = [ColumnarBatch.baseIsSent << 1] }),
        ("node-index-out-of-range", oneEntry { $0[6] = [1] }),
        ("node-table-too-long", oneEntry { $0[0] = [0x7F] + Array(repeating: 0, count: 8) }),
        ("encoding-index-out-of-range", oneEntry { $0[4] = [3] }),
        ("value-longer-than-column", oneEntry { $0[9] = [5] + Array("x".utf8) }),
        ("values-left-over", oneEntry { $0[9] = [1] + Array("xy".utf8) }),
        ("trailing-bytes", oneEntry() + [0]),
    ]

    /// What each malformed case's error says: refused for the reason it was built for.
    static let reasons: [String: String] = [
        "too-many-entries": "announces 1000000 entries",
        "count-beyond-payload": "announces 40 entries",
        "column-longer-than-payload": "the encodings column of a columnar batch announces 6 bytes",
        "column-left-over-bytes": "the encoding indexes column of a columnar batch has 1 bytes left over",
        "flags-column-short": "the flags column of a columnar batch has 0 bytes for 1 entries",
        "undefined-flags": "undefined flags 8",
        "undefined-base-kind": "undefined flags 6",
        "prefix-longer-than-previous-key": "shares 3 bytes with a previous key of 0",
        "key-over-limit": "a key of 1100 bytes",
        "key-not-utf8": "not valid UTF-8",
        "version-delta-overflow": "the version of entry 1 of a columnar batch is out of range",
        "version-negative": "the version of entry 0 of a columnar batch is out of range",
        "base-delta-overflow": "the base of entry 0 of a columnar batch is out of range",
        "base-missing": "the base columns are exhausted",
        "node-index-out-of-range": "names node 1 of 1",
        "node-table-too-long": "the nodes column of a columnar batch has 127 items",
        "encoding-index-out-of-range": "names encoding 3 of 1",
        "value-longer-than-column": "value 0 of a columnar batch announces 5 bytes",
        "values-left-over": "add up to 1 bytes, the column holds 2",
        "trailing-bytes": "1 trailing bytes",
    ]

    @Test func theValidBaseOfTheMalformedCasesDecodes() throws {
        let message = try SyncMessage(frame: Frame(type: 2, payload: Self.oneEntry()))
        #expect(message == .batch(.init(id: 7, entries: [WireEntry(key: "ab", version: HLCTimestamp(packed: 5, node: 9), base: .zero,
                                                                     deleted: false, encoding: "json", value: Array("x".utf8))])))
    }

    @Test func malformedBatchesAreRefusedWithAClearError() throws {
        #expect(Self.malformed.count >= 20)
        for (name, payload) in Self.malformed {
            do {
                _ = try SyncMessage(frame: Frame(type: 2, payload: payload))
                Issue.record("\(name) was accepted")
            } catch let error as SyncError {
                #expect(error.code == .malformedMessage, "\(name): \(error)")
                #expect(error.message.contains(Self.reasons[name] ?? "?"), "\(name): \(error.message)")
            }
        }
    }

    /// The fail cases on disk are the ones above, each refused. Write them
    /// (only new ones) with `SYNCENGINE_WRITE_GOLDEN=1`.
    @Test func failCaseFixturesAreRefused() throws {
        let folder = WireGoldenTests.folder.deletingLastPathComponent().appendingPathComponent("fail-cases")
        let codec = FrameCodec()
        if ProcessInfo.processInfo.environment["SYNCENGINE_WRITE_GOLDEN"] == "1" {
            for (name, payload) in Self.malformed {
                let url = folder.appendingPathComponent("engine-v2-\(name).bin")
                if !FileManager.default.fileExists(atPath: url.path) {
                    try Data(codec.encode(Frame(type: 2, payload: payload), allowCompression: false)).write(to: url)
                }
            }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("engine-v2-") }.sorted()
        #expect(files.count == Self.malformed.count)
        for file in files {
            let frame = try codec.decode(Array(try Data(contentsOf: folder.appendingPathComponent(file))))
            #expect(throws: SyncError.self, "\(file)") { _ = try SyncMessage(frame: frame) }
        }
    }

    /// Seeded mutations of columnar batches: only `SyncError`s, never a trap;
    /// what decodes encodes again. Some go into a live session of a watch
    /// that speaks only protocol 1: it refuses them and its store is unchanged.
    @Test func mutatedColumnarBatchesNeverTrap() async throws {
        let pair = try Pair()
        try await pair.watch.set(99, for: TestKeys.steps)
        var protocolOne = ReplicationConfiguration(pairingEpoch: "fuzz")
        protocolOne.protocolRange = 1...1
        // A first session syncs the watch's value; from then on sessions only hand over mutated batches.
        _ = WireVersionTests.exchange(ReplicationEndpoint(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "fuzz")),
                                      ReplicationEndpoint(store: pair.watch, configuration: protocolOne), start: true)
        let before = try pair.watch.allEntryInfo()
        let seed = UInt64(ProcessInfo.processInfo.environment["SYNCENGINE_FUZZ_SEED"] ?? "") ?? 20_261_123
        print("columnar batch fuzz seed: \(seed)")
        var random = SeededRandom(seed: seed)
        let originals = [Self.mixed, Self.family(40), Self.family(40, changed: true)].map {
            SyncMessage.batch(.init(id: 3, entries: $0)).frame(protocolVersion: 2)
        } + Self.malformed.map { Frame(type: 2, payload: $0.1) }
        var decoded = 0
        for i in 0..<30_000 {
            var frame = originals[i % originals.count]
            let flips = 1 + Int(random.next(below: 4))
            for _ in 0..<flips where frame.payload.count > 1 {
                let at = 1 + Int(random.next(below: UInt64(frame.payload.count - 1)))
                if random.nextBool(probability: 0.5) {
                    frame.payload[at] ^= UInt8(truncatingIfNeeded: 1 << random.next(below: 8))
                } else {
                    frame.payload[at] = UInt8(truncatingIfNeeded: random.next(below: 256))
                }
            }
            if random.nextBool(probability: 0.2) { frame.payload = Array(frame.payload.prefix(Int(random.next(below: UInt64(frame.payload.count + 1))))) }
            do {
                let message = try SyncMessage(frame: frame)
                decoded += 1
                _ = message.frame(protocolVersion: 2)
            } catch let error as SyncError {
                #expect(error.code == .malformedMessage)
            }
            if i % 100 == 0, frame.payload.first == ColumnarBatch.payloadSchema {
                let phone = ReplicationEndpoint(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "fuzz"))
                let watch = ReplicationEndpoint(store: pair.watch, configuration: protocolOne)
                _ = WireVersionTests.exchange(phone, watch, start: true)
                #expect(watch.isEstablished)
                _ = watch.receive(frame, now: 1_000)
                #expect(watch.failure != nil, "a columnar batch in a protocol-1 session")
            }
        }
        #expect(decoded < 30_000)
        #expect(try pair.watch.allEntryInfo() == before)
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// A peer's batch that announces far more entries than any sender puts in
/// one, each a few bytes: a small frame that would cost this side a lot to
/// decode, plan and acknowledge.
@Suite struct HostileBatchSizeTests {
    /// Endpoints of a pair that speak protocol 2 at most (schema-2 batches need no stream range).
    static func protocolTwo(_ pair: Pair) -> (phone: ReplicationEndpoint, watch: ReplicationEndpoint) {
        var config = ReplicationConfiguration(pairingEpoch: "test")
        config.protocolRange = 1...2
        return (ReplicationEndpoint(store: pair.phone, configuration: config), ReplicationEndpoint(store: pair.watch, configuration: config))
    }

    /// A schema-2 batch of `count` deleted entries of about 6 bytes each: every
    /// key empty (`00 00`), every flag `01`, every column zero but the first version.
    static func tinyEntries(_ count: Int) -> [UInt8] {
        var nodes = ByteWriter()
        nodes.writeVarInt(1)
        nodes.writeUInt32(9)
        var encodings = ByteWriter()
        encodings.writeVarInt(1)
        encodings.writeString("json")
        return ColumnarBatchTests.payload(count: UInt64(count), columns: [
            nodes.bytes, encodings.bytes, [UInt8](repeating: 0, count: 2 * count), [UInt8](repeating: 1, count: count),
            [UInt8](repeating: 0, count: count), ColumnarBatchTests.varints([10]) + [UInt8](repeating: 0, count: count - 1),
            [UInt8](repeating: 0, count: count), [], [], [],
        ])
    }

    static func isAck(_ frame: Frame) -> Bool {
        if case .ack? = try? SyncMessage(frame: frame) { true } else { false }
    }

    /// 1,000,000 entries in 6 MB inflated (a few KB deflated) were decoded and
    /// planned (200-250 MB), and their acknowledgement (13 MB) was over the
    /// frame limit. The batch is refused before its entries are read.
    @Test func aBatchAnnouncingAMillionTinyEntriesIsRefused() async throws {
        let pair = try Pair()
        let (phone, watch) = Self.protocolTwo(pair)
        HostileSessionTests.exchange(phone, watch, start: true)
        try #require(phone.isEstablished && phone.failure == nil)
        let before = try pair.phone.allEntryInfo()
        let payload = Self.tinyEntries(1_000_000)
        let wire = try FrameCodec().encode(Frame(type: SyncMessage.MessageType.batch.rawValue, payload: payload), allowCompression: true)
        #expect(wire.count < 16 * 1024, "the hostile frame is small on the wire")

        let out = phone.receive(Frame(type: SyncMessage.MessageType.batch.rawValue, payload: payload), now: 2_000)
        #expect(phone.failure?.code == .malformedMessage)
        #expect(phone.failure?.message.contains("1000000 entries") == true)
        let acknowledged = out.contains(where: Self.isAck)
        #expect(!acknowledged)
        #expect(try pair.phone.allEntryInfo() == before)
    }

    /// A batch this side accepts, each of its entries refused with a key of
    /// 1,000 bytes (prefix-coded: 8 bytes or so each on the wire): its
    /// acknowledgement named every key, 8 MB, over what the peer's transport
    /// takes. It names as many as fit and still counts the batch as received.
    @Test func theAcknowledgementOfAnAcceptedBatchFitsAFrame() async throws {
        let pair = try Pair()
        let (phone, watch) = Self.protocolTwo(pair)
        HostileSessionTests.exchange(phone, watch, start: true)
        try #require(phone.isEstablished && phone.failure == nil)
        let prefix = String(repeating: "u", count: 990)
        let version = HLCTimestamp(packed: 1 << 32, node: pair.watch.nodeID)
        let entries = (0..<8_000).map { i in
            WireEntry(key: prefix + String(format: "%010d", i), version: version, base: .zero, deleted: true, encoding: "json", value: nil)
        }
        let payload = ColumnarBatch.encode(id: 1 << 40, entries: entries)
        let out = phone.receive(Frame(type: SyncMessage.MessageType.batch.rawValue, payload: payload), now: 2_000)
        #expect(phone.failure == nil)
        let acks = out.filter(Self.isAck)
        try #require(acks.count == 1)
        let size = acks[0].payload.count
        #expect(size <= FrameLimits.default.maxFrameSize / 2, "an acknowledgement of \(size) bytes")
        guard case .ack(let ack) = try SyncMessage(frame: acks[0]) else { Issue.record("not an ack"); return }
        #expect(ack.batchID == 1 << 40 && ack.applied == 0)
        #expect(!ack.rejected.isEmpty && ack.rejected.count < entries.count)
    }
}

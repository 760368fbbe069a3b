import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) @testable import SyncTransport
import Testing

/// A large value (sent in chunks) that the receiver refuses for good, here
/// for being over its `maxValueSize`: from protocol 7 on the receiver's chunk
/// acknowledgement names the code (payload schema 7), and the sender reports
/// the refusal exactly as it reports an entry a batch's acknowledgement
/// refused — one `.error` naming `key (value-too-large)`, the entry counted
/// once in `entriesSent`, the same peer state — and sends no more of its
/// chunks. With a peer of protocol 6 or older nothing changes on the wire:
/// the session converges and never fails, and the sender is not told.
@Suite(.timeLimit(.minutes(5))) struct ChunkRefusalTests {
    /// Over the automatic threshold (100 KB): deferred until `sync()`, then sent in chunks.
    static let chunked = Data(repeating: 9, count: 200_000)
    /// Over the watch's limit (`ValueLimitMismatchTests.smallLimit`), sent in a batch.
    static let inline = ValueLimitMismatchTests.between

    static func configuration(_ range: ClosedRange<UInt16>) -> ReplicationConfiguration {
        var configuration = ReplicationConfiguration(pairingEpoch: "test")
        configuration.protocolRange = range
        return configuration
    }

    /// What the phone ends with after the watch refused `value`, sent live
    /// with a later change of another key: its events, counters and state.
    struct Outcome: Equatable {
        var refusals: [String]
        var entriesSent: Int
        var peerHas: Bool
        var isPending: Bool
        var pendingTotal: Int
        var watchHolds: Bool
        var watchHasTheLaterChange: Bool
        var idle: Bool
    }

    static func refuse(_ value: Data, phoneHighest: UInt16 = SyncMessage.highestProtocolVersion,
                       watchHighest: UInt16 = SyncMessage.highestProtocolVersion) async throws -> (Outcome, Link) {
        let pair = try ValueLimitMismatchTests.pair(smaller: .watch)
        let phoneEvents = pair.phone.events()
        let link = Link(endpoints: ReplicationEndpoint(store: pair.phone, configuration: configuration(1...phoneHighest)),
                        ReplicationEndpoint(store: pair.watch, configuration: configuration(1...watchHighest)), now: 1_000)
        link.connect()
        try await pair.phone.set(value, for: TestKeys.blob)
        _ = try pair.phone.requestManualSync()
        pair.phoneClock.advance(by: 1)
        try await pair.phone.set(42, for: TestKeys.steps)
        link.settle()
        link.now += 60_000
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil, "\(String(describing: link.a.failure)) \(String(describing: link.b.failure))")
        let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.blob.name))
        let outcome = Outcome(refusals: [], entriesSent: pair.phone.syncCounters.entriesSent,
                              peerHas: try pair.phone.peerHas(key: TestKeys.blob.name, atLeast: info.version),
                              isPending: info.isPending, pendingTotal: try pair.phone.pendingSummary().total,
                              watchHolds: try pair.watch.storedValue(for: TestKeys.blob) != nil,
                              watchHasTheLaterChange: try pair.watch.storedValue(for: TestKeys.steps) == 42,
                              idle: link.a.isIdle && link.b.isIdle)
        pair.phone.close()
        pair.watch.close()
        let events = try await all(of: phoneEvents, "the phone's events")
        var result = outcome
        result.refusals = ValueLimitMismatchTests.errors(events, containing: "refused").map(\.message)
        return (result, link)
    }

    /// The chunk acknowledgements that went over `link`.
    static func chunkAcks(_ link: Link) -> [(schema: UInt8?, ack: SyncMessage.ChunkAck?)] {
        link.frames.filter { $0.frame.type == SyncMessage.MessageType.chunkAck.rawValue }
            .map { ($0.frame.payload.first, (try? SyncMessage(frame: $0.frame))?.asChunkAck) }
    }

    @Test func aChunkedValueTheWatchRefusesIsReportedToThePhoneAsABatchRefusalIs() async throws {
        let (chunked, link) = try await Self.refuse(Self.chunked)
        #expect(chunked.refusals == ["the peer refused 1 entries: blob (value-too-large)"], "\(chunked.refusals)")
        let acks = Self.chunkAcks(link)
        #expect(acks.contains { $0.schema == SyncMessage.refusalPayloadSchema && $0.ack?.refusal == "value-too-large" }, "\(acks)")
        // The same observable result as a value sent in a batch and refused.
        let (inline, _) = try await Self.refuse(Self.inline)
        #expect(inline.refusals == chunked.refusals)
        #expect(chunked == inline, "chunked \(chunked), in a batch \(inline)")
        #expect(chunked.entriesSent == 2 && !chunked.watchHolds && chunked.watchHasTheLaterChange && chunked.idle, "\(chunked)")
    }

    /// The refusal stops the transfer: once the phone has it, no chunk of the
    /// value goes, even the window it had not sent yet.
    @Test func theRefusalStopsTheChunksLeft() async throws {
        let pair = try ValueLimitMismatchTests.pair(smaller: .watch)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let value = Data(repeating: 3, count: 2_000_000)
        try await pair.phone.set(value, for: TestKeys.blob)
        _ = try pair.phone.requestManualSync()
        // Frame by frame, each answered at once: the refusal of the first chunk comes back
        // while the rest of the window is on its way, and no chunk goes after it.
        var sent = 0
        var pending = link.a.pump(now: link.now)
        while !pending.isEmpty, sent <= 1_000 {
            let frame = pending.removeFirst()
            if frame.type == SyncMessage.MessageType.chunk.rawValue { sent += 1 }
            for reply in link.b.receive(frame, now: link.now) { pending += link.a.receive(reply, now: link.now) }
            pending += link.a.pump(now: link.now)
        }
        let count = (value.count + ReplicationConfiguration().chunkSize - 1) / ReplicationConfiguration().chunkSize
        #expect(sent <= ReplicationConfiguration().window && sent < count, "sent \(sent) of \(count) chunks of a refused value")
        link.settle()
        #expect(link.a.isIdle && link.b.isIdle, "\(link.a.idleBlockers) \(link.b.idleBlockers)")
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == nil)
        pair.phone.close()
        pair.watch.close()
    }

    /// Either side of protocol 6 (the last before refusals), or older: the
    /// acknowledgements stay as that protocol writes them, the session
    /// converges and does not fail; the phone is not told (the wire has no word for it).
    @Test(arguments: [(UInt16(6), UInt16(7)), (7, 6), (5, 7), (7, 4), (1, 7)])
    func anOlderPeerStillConverges(phoneHighest: UInt16, watchHighest: UInt16) async throws {
        let (outcome, link) = try await Self.refuse(Self.chunked, phoneHighest: phoneHighest, watchHighest: watchHighest)
        #expect(outcome.refusals.isEmpty, "\(outcome.refusals)")
        #expect(!outcome.watchHolds && outcome.watchHasTheLaterChange && outcome.idle, "\(outcome)")
        let acks = Self.chunkAcks(link)
        #expect(!acks.isEmpty)
        #expect(acks.allSatisfy { $0.schema != SyncMessage.refusalPayloadSchema && $0.ack?.refusal == nil }, "\(acks)")
    }

    /// A refusal in a session that negotiated 6 is a protocol violation: the session ends.
    @Test func aRefusalInASessionOfProtocolSixEndsIt() async throws {
        let pair = try Pair()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...6))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...6))
        Link(endpoints: phone, watch, now: 1_000).connect()
        #expect(phone.failure == nil)
        let ack = SyncMessage.chunkAck(.init(key: TestKeys.blob.name, version: HLCTimestamp(packed: 1 << 30, node: 0x2002), index: 0, complete: true,
                                             value: .init(totalSize: 200_000, totalChecksum: 1), staged: 0, refusal: "value-too-large"))
        _ = phone.receive(ack.frame(protocolVersion: 7), now: 1_000)
        #expect(phone.failure?.code == .protocolViolation, "\(String(describing: phone.failure))")
        pair.phone.close()
        pair.watch.close()
    }

    /// A value held from before the limit shrank that comes again in chunks
    /// (a resend, a re-baseline) is what the store holds: acknowledged as held,
    /// not refused as too large, as its copy in a batch is
    /// (`ValueLimitMismatchTests`): no error on either side, nothing counted rejected.
    @Test func aValueHeldFromBeforeTheLimitShrankIsNotRefusedWhenItComesAgainInChunks() async throws {
        var pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        try await pair.phone.set(Self.chunked, for: TestKeys.blob)
        _ = try pair.phone.requestManualSync()
        link.settle()
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.chunked)
        let first = try #require(link.frames.first { (sent: (from: String, frame: Frame)) -> Bool in
            sent.from == "a" && (try? SyncMessage(frame: sent.frame))?.asChunk?.index == 0
        }).frame
        try Self.reopenWatchWithASmallerLimit(&pair)
        let watchEvents = pair.watch.events()
        let again = Link(pair.phone, pair.watch)
        again.connect()
        let replies = again.b.receive(first, now: again.now).compactMap { try? SyncMessage(frame: $0).asChunkAck }
        #expect(replies.count == 1 && replies.allSatisfy { $0.complete && $0.refusal == nil }, "\(replies)")
        #expect(again.b.failure == nil)
        #expect(pair.watch.syncCounters.entriesRejected == 0)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.chunked)
        pair.phone.close()
        pair.watch.close()
        let events = try await all(of: watchEvents, "the watch's events")
        #expect(ValueLimitMismatchTests.errors(events, containing: TestKeys.blob.name).isEmpty, "\(events)")
    }

    /// Every way a receiver refuses a chunked value for good names the code
    /// a batch's acknowledgement gives the same entry: a key not declared, one
    /// the phone may not send, another encoding, a version far ahead.
    @Test(arguments: ["unknown", "watch-only key", "encoding", "version"])
    func aChunkRefusalNamesTheCodeABatchWouldGive(_ reason: String) async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let node = pair.phone.nodeID
        let now = pair.watchClock.nowMilliseconds()
        var entry = WireEntry(key: TestKeys.blob.name, version: HLCTimestamp(physicalMilliseconds: now, counter: 0, node: node), base: .zero,
                              deleted: false, encoding: try #require(try TestKeys.registry().descriptor(forEntry: TestKeys.blob.name)).encoding, value: [])
        switch reason {
        case "unknown": entry.key = "nope"
        case "watch-only key": entry.key = TestKeys.watchFace.name
        case "encoding": entry.encoding = "json"
        default: entry.version = HLCTimestamp(physicalMilliseconds: now + 20 * 365 * 86_400_000, counter: 0, node: node)
        }
        let bytes = [UInt8](Self.chunked)
        let size = ReplicationConfiguration().chunkSize
        let slice = Array(bytes[0..<size])
        let chunk = SyncMessage.chunk(.init(entry: entry, totalSize: bytes.count, totalChecksum: Checksum.crc32(bytes), index: 0,
                                            count: (bytes.count + size - 1) / size, checksum: Checksum.crc32(slice), bytes: slice))
        let chunkAck = try #require(link.b.receive(chunk.frame(protocolVersion: 7), now: link.now)
            .compactMap { try? SyncMessage(frame: $0).asChunkAck }.first)
        var whole = entry
        whole.value = bytes
        let batchAck = try #require(link.b.receive(SyncMessage.batch(.init(id: 1 << 40, entries: [whole])).frame(protocolVersion: 7), now: link.now)
            .compactMap { try? SyncMessage(frame: $0).asAck }.first)
        #expect(link.b.failure == nil)
        #expect(batchAck.rejected.count == 1, "\(batchAck)")
        #expect(chunkAck.complete && chunkAck.refusal == batchAck.rejected.first?.code, "\(chunkAck) \(batchAck)")
        pair.phone.close()
        pair.watch.close()
    }

    /// Over running peers (TCP on 127.0.0.1, and the in-memory link) the
    /// phone hears of the refusal of a value it sent in chunks, and both go idle.
    @Test(arguments: LinkKind.allCases)
    func runningPeersReportAChunkedRefusalToTheSender(over kind: LinkKind) async throws {
        let pair = try ValueLimitMismatchTests.pair(smaller: .watch)
        let phoneEvents = pair.phone.events()
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await pair.phone.set(Self.chunked, for: TestKeys.blob)
            _ = try phone.sync()
            let refusal = try await first(of: phoneEvents, "the phone hearing of the refusal") { event in
                if case .error(let error) = event { error.message.contains("blob (value-too-large)") } else { false }
            }
            #expect("\(refusal)".contains("the peer refused 1 entries"))
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await watch.waitUntilIdle(timeout: .seconds(30))
            #expect(try pair.watch.storedValue(for: TestKeys.blob) == nil)
        }
    }

    /// Queued delivery sends no chunks: a large value goes whole in a queued
    /// batch, and a receiver that refuses it names it in the batch's queued
    /// acknowledgement, so the sender reports it as over a live session.
    @Test func aLargeValueRefusedThroughTheMailboxIsReportedToItsSender() async throws {
        let pair = try ValueLimitMismatchTests.pair(smaller: .watch)
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        let phoneEvents = pair.phone.events()
        try await pair.phone.set(Self.chunked, for: TestKeys.blob)
        _ = try pair.phone.requestManualSync()
        try await pair.phone.set(42, for: TestKeys.steps)
        _ = try phone.deliverQueued(through: phoneBox)
        _ = try watch.deliverQueued(through: watchBox)
        _ = try phone.deliverQueued(through: phoneBox)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 42)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == nil)
        let again = try phone.deliverQueued(through: phoneBox)
        #expect(again.entriesPosted == 0, "\(again)")
        pair.phone.close()
        pair.watch.close()
        let events = try await all(of: phoneEvents, "the phone's events")
        #expect(ValueLimitMismatchTests.errors(events, containing: "refused").map(\.message)
                == ["the peer refused 1 entries: blob (value-too-large)"], "\(events)")
    }

    /// A transfer resumed after its first chunk, whose value the watch's
    /// `maxValueSize` (shrunk since its first chunks were staged) refuses, is
    /// counted and reported once on the watch, and its staged chunks go.
    /// Before, only a refusal of chunk 0 was: the resumed one was neither
    /// counted nor reported, and the staged chunks stayed.
    @Test func aResumedTransferRefusedForTheShrunkLimitIsReportedAndItsChunksDropped() async throws {
        var pair = try Pair()
        let node = pair.phone.nodeID
        let now = pair.watchClock.nowMilliseconds()
        let entry = WireEntry(key: TestKeys.blob.name, version: HLCTimestamp(physicalMilliseconds: now, counter: 0, node: node), base: .zero,
                              deleted: false, encoding: try #require(try TestKeys.registry().descriptor(forEntry: TestKeys.blob.name)).encoding,
                              value: [])
        let bytes = [UInt8](Self.chunked)
        let size = ReplicationConfiguration().chunkSize
        let count = (bytes.count + size - 1) / size
        func chunk(_ index: Int) -> Frame {
            let slice = Array(bytes[index * size..<min(bytes.count, (index + 1) * size)])
            return SyncMessage.chunk(.init(entry: entry, totalSize: bytes.count, totalChecksum: Checksum.crc32(bytes), index: index,
                                           count: count, checksum: Checksum.crc32(slice), bytes: slice)).frame(protocolVersion: 7)
        }
        let first = Link(pair.phone, pair.watch)
        first.connect()
        for index in 0..<2 { _ = first.b.receive(chunk(index), now: first.now) }
        #expect(try pair.watch.partialTransfers().map(\.received) == [2])
        try Self.reopenWatchWithASmallerLimit(&pair)
        let watchEvents = pair.watch.events()
        let again = Link(pair.phone, pair.watch)
        again.connect()
        for index in 2..<count {
            let replies = again.b.receive(chunk(index), now: again.now).compactMap { try? SyncMessage(frame: $0).asChunkAck }
            #expect(replies.count == 1 && replies.allSatisfy { $0.complete && $0.refusal == "value-too-large" }, "\(replies)")
        }
        #expect(again.b.failure == nil)
        #expect(pair.watch.syncCounters.entriesRejected == 1)
        #expect(try pair.watch.partialTransfers().isEmpty, "the staged chunks of a value refused for good stayed")
        pair.phone.close()
        pair.watch.close()
        let events = try await all(of: watchEvents, "the watch's events")
        #expect(ValueLimitMismatchTests.errors(events, containing: TestKeys.blob.name).count == 1, "\(events)")
    }

    /// The watch's app starts again with `maxValueSize` 150,000 (under the chunked value's size).
    static func reopenWatchWithASmallerLimit(_ pair: inout Pair) throws {
        pair.watch.close()
        var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
        options.maxValueSize = 150_000
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(), options: options)
    }
}

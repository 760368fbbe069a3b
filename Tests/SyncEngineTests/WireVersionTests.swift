import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Session protocol negotiation: two builds of protocol 2 send columnar
/// batches; a node that speaks only protocol 1 (`protocolRange = 1...1`,
/// what every earlier build announces) and one of protocol 2 still sync, in
/// protocol 1; a columnar batch in a protocol-1 session is refused.
@Suite(.timeLimit(.minutes(5))) struct WireVersionTests {
    static func configuration(_ range: ClosedRange<UInt16>, epoch: String = "test") -> ReplicationConfiguration {
        var configuration = ReplicationConfiguration(pairingEpoch: epoch)
        configuration.protocolRange = range
        return configuration
    }

    /// Exchanges frames between two endpoints until nothing more moves; returns every frame, in order.
    static func exchange(_ a: ReplicationEndpoint, _ b: ReplicationEndpoint, start: Bool) -> [Frame] {
        var all: [Frame] = []
        var toB = start ? a.start(now: 1_000) : a.pump(now: 1_000)
        var toA = start ? b.start(now: 1_000) : b.pump(now: 1_000)
        var rounds = 0
        while !(toA.isEmpty && toB.isEmpty), rounds < 10_000 {
            rounds += 1
            let sendB = toB, sendA = toA
            toB = []
            toA = []
            for frame in sendB {
                all.append(frame)
                toA += b.receive(frame, now: 1_000)
            }
            for frame in sendA {
                all.append(frame)
                toB += a.receive(frame, now: 1_000)
            }
            if toA.isEmpty && toB.isEmpty {
                toB = a.pump(now: 1_000)
                toA = b.pump(now: 1_000)
            }
        }
        return all
    }

    static func batchSchemas(_ frames: [Frame]) -> Set<UInt8> {
        Set(frames.filter { $0.type == SyncMessage.MessageType.batch.rawValue }.compactMap(\.payload.first))
    }

    @Test func theDefaultSpeaksProtocolSeven() {
        #expect(ReplicationConfiguration().protocolRange == 1...7)
        #expect(SyncMessage.highestProtocolVersion == 7)
    }

    /// A large value crosses between this build and a build of protocol 4
    /// (or older), either side the older one; the chunk acknowledgements name
    /// the value (payload schema 5) only when both speak protocol 5. Were one
    /// sent to an older peer, it would end the session with `malformed-message`.
    @Test(arguments: [(UInt16(5), UInt16(5), UInt8(5)), (5, 4, 1), (4, 5, 1), (5, 1, 1), (1, 5, 1)])
    func chunkAcknowledgementsNameTheValueWhenBothSpeakFive(phoneHighest: UInt16, watchHighest: UInt16, schema: UInt8) async throws {
        let pair = try Pair()
        let value = Data((0..<(300 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try await pair.phone.set(value, for: TestKeys.blob)
        try pair.phone.requestManualSync()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...phoneHighest))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...watchHighest))
        let frames = Self.exchange(phone, watch, start: true)
        #expect(phone.failure == nil && watch.failure == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == value)
        let acks = frames.filter { $0.type == SyncMessage.MessageType.chunkAck.rawValue }
        #expect(acks.count == 5)
        #expect(Set(acks.compactMap(\.payload.first)) == [schema])
    }

    /// `phoneHighest`, `watchHighest`: the top of each side's protocol range (both start at 1).
    @Test(arguments: [(UInt16(5), UInt16(5), UInt8(3)), (5, 4, 3), (4, 5, 3), (5, 1, 1), (UInt16(4), UInt16(4), UInt8(3)), (4, 3, 3), (3, 4, 3), (4, 1, 1), (3, 3, 3), (2, 3, 2), (3, 2, 2), (2, 2, 2), (1, 3, 1), (1, 2, 1), (2, 1, 1), (1, 1, 1)])
    func batchesUseTheHighestProtocolBothSpeak(phoneHighest: UInt16, watchHighest: UInt16, schema: UInt8) async throws {
        let phoneRange = 1...phoneHighest, watchRange = 1...watchHighest
        let pair = try Pair()
        for i in 0..<50 { try await pair.phone.set(i, for: TestKeys.daily["d\(i)"]) }
        try await pair.phone.set(5, for: TestKeys.steps)
        try await pair.watch.set(["w"], for: TestKeys.tags)
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(phoneRange))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(watchRange))
        var frames = Self.exchange(phone, watch, start: true)
        #expect(phone.failure == nil && watch.failure == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.daily["d49"]) == 49)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["w"])
        // Changes after the initial sync, both ways, in the same session: bases are sent now.
        for i in 0..<50 { try await pair.phone.set(i + 100, for: TestKeys.daily["d\(i)"]) }
        try await pair.watch.remove(TestKeys.steps)
        frames += Self.exchange(phone, watch, start: false)
        #expect(phone.failure == nil && watch.failure == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.daily["d7"]) == 107)
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == nil)
        #expect(Self.batchSchemas(frames) == [schema])
    }

    /// A peer that negotiated protocol 1 and sends a columnar batch anyway
    /// breaks the protocol: refused, nothing applied.
    @Test func aColumnarBatchInAProtocolOneSessionIsRefused() async throws {
        let pair = try Pair()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...2))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...1))
        _ = Self.exchange(phone, watch, start: true)
        #expect(watch.isEstablished)
        let entry = WireEntry(key: "health:daily:steps", version: HLCTimestamp(physicalMilliseconds: 1_000, counter: 0, node: pair.phone.nodeID),
                              base: .zero, deleted: false, encoding: "json", value: Array("8".utf8))
        let columnar = SyncMessage.batch(.init(id: 900, entries: [entry])).frame(protocolVersion: 2)
        let reply = watch.receive(columnar, now: 1_000)
        #expect(watch.failure?.code == .protocolViolation)
        #expect(reply.compactMap { try? SyncMessage(frame: $0) }.contains { if case .error(let e) = $0 { e.code == "protocol-violation" } else { false } })
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
        // The same entry in schema 1 is what that session takes.
        let v1Watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...1))
        let v2Phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...2))
        _ = Self.exchange(v2Phone, v1Watch, start: true)
        _ = v1Watch.receive(SyncMessage.batch(.init(id: 901, entries: [entry])).frame(), now: 1_000)
        #expect(v1Watch.failure == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 8)
    }

    /// A peer that negotiated protocol 4 and sends a chunk acknowledgement
    /// that names its value anyway breaks the protocol: the session ends; the
    /// same acknowledgement in schema 1 is taken.
    @Test func aValueNamingChunkAcknowledgementInAProtocolFourSessionIsRefused() async throws {
        let pair = try Pair()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...5))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...4))
        _ = Self.exchange(phone, watch, start: true)
        #expect(phone.isEstablished && phone.failure == nil)
        let ack = SyncMessage.chunkAck(.init(key: "blob", version: HLCTimestamp(physicalMilliseconds: 1_000, counter: 0, node: pair.phone.nodeID),
                                             index: 0, complete: false, value: .init(totalSize: 200_000, totalChecksum: 1), staged: 1))
        _ = phone.receive(ack.frame(protocolVersion: 4), now: 1_000)
        #expect(phone.failure == nil)
        let reply = phone.receive(ack.frame(protocolVersion: 5), now: 1_000)
        #expect(phone.failure?.code == .protocolViolation)
        #expect(reply.compactMap { try? SyncMessage(frame: $0) }.contains { if case .error(let e) = $0 { e.code == "protocol-violation" } else { false } })
    }

    /// A peer that negotiated protocol 2 and sends a stream range or a
    /// receipt anyway breaks the protocol: refused, nothing applied.
    @Test(arguments: [true, false])
    func aRangeOrAReceiptInAProtocolTwoSessionIsRefused(receipt: Bool) async throws {
        let pair = try Pair()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...3))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...2))
        _ = Self.exchange(phone, watch, start: true)
        #expect(watch.isEstablished && watch.failure == nil)
        let entry = WireEntry(key: "health:daily:steps", version: HLCTimestamp(physicalMilliseconds: 1_000, counter: 0, node: pair.phone.nodeID),
                              base: .zero, deleted: false, encoding: "json", value: Array("8".utf8))
        let frame = receipt ? SyncMessage.receipt(.init(id: 900, receivedThrough: 1_000, receivedAnchor: 0, acknowledgedThrough: 0, acknowledgedAnchor: 0)).frame()
            : SyncMessage.batch(.init(id: 900, entries: [entry], range: .init(lower: 0, upper: 9, anchor: 1))).frame(protocolVersion: 3)
        let reply = watch.receive(frame, now: 1_000)
        #expect(watch.failure?.code == .protocolViolation)
        #expect(reply.compactMap { try? SyncMessage(frame: $0) }.contains { if case .error(let e) = $0 { e.code == "protocol-violation" } else { false } })
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
    }

    /// A phone that negotiated protocol 3 and sends a re-baseline notice
    /// naming its generation anyway breaks the protocol: refused, nothing
    /// removed or marked.
    @Test func aNoticeWithAGenerationInAProtocolThreeSessionIsRefused() async throws {
        let pair = try Pair()
        try await pair.watch.set(["w"], for: TestKeys.tags)
        let phone = ReplicationEndpoint(store: pair.phone, configuration: Self.configuration(1...4))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: Self.configuration(1...3))
        _ = Self.exchange(phone, watch, start: true)
        #expect(watch.isEstablished && watch.failure == nil)
        let purged = try #require(try pair.watch.entryInfo(forKey: TestKeys.tags.name)).version.packed
        let reply = watch.receive(SyncMessage.rebaseline(.init(id: 900, purgedThrough: purged, generation: 2)).frame(protocolVersion: 4), now: 1_000)
        #expect(watch.failure?.code == .protocolViolation)
        #expect(reply.compactMap { try? SyncMessage(frame: $0) }.contains { if case .error(let e) = $0 { e.code == "protocol-violation" } else { false } })
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["w"])
        #expect(try pair.watch.rebaselineMarkCount() == 0)
        #expect(try pair.watch.liveRebaselineGeneration(from: pair.phone.nodeID) == nil)
    }

    /// A peer of protocol 1 (or 2) only and one of this build's protocol over
    /// real TCP on 127.0.0.1 (handshake, encryption, compression), each side
    /// being the old one in turn: values and deletes cross both ways. (Were
    /// a columnar batch, a stream range or a receipt sent to the old peer, it
    /// would end every session with `protocol-violation` or
    /// `malformed-message` and nothing would cross.)
    @Test(arguments: [(true, UInt16(1)), (false, 1), (true, 2), (false, 2)])
    func anOlderPeerAndANewerPeerSyncOverTCP(watchIsOld: Bool, oldHighest: UInt16) async throws {
        let pair = try Pair()
        for i in 0..<300 { try await pair.phone.set(i, for: TestKeys.daily["d\(i)"]) }
        try await pair.watch.set(["from the watch"], for: TestKeys.tags)
        let secret = PairingSecret.generate()
        let old = Self.configuration(1...oldHighest, epoch: secret.epoch)
        let new = Self.configuration(1...SyncMessage.highestProtocolVersion, epoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: watchIsOld ? new : old, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: watchIsOld ? old : new, tickInterval: .milliseconds(50))
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let server = Task { await phone.serve(listener) }
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        let outcome = await Result {
            try await eventually(pair.watch, "the phone's 300 values on the watch") { try pair.watch.storedValue(for: TestKeys.daily["d299"]) == 299 }
            try await eventually(pair.phone, "the watch's tags on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == ["from the watch"] }
            for i in 0..<300 { try await pair.phone.set(i + 1_000, for: TestKeys.daily["d\(i)"]) }
            try await pair.watch.remove(TestKeys.tags)
            try await eventually(pair.watch, "the changed values on the watch") { try pair.watch.storedValue(for: TestKeys.daily["d299"]) == 1_299 }
            try await eventually(pair.phone, "the watch's delete on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == nil }
            try await phone.waitUntilIdle(timeout: waitLimit)
            for i in 0..<300 { #expect(try pair.watch.storedValue(for: TestKeys.daily["d\(i)"]) == i + 1_000) }
        }
        client.cancel()
        await listener.close()
        server.cancel()
        try await withDeadline("the server and the client to stop") { _ = await (server.value, client.value) }
        try outcome.get()
    }
}

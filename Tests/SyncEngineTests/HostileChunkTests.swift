import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// A paired peer whose chunks are well formed, each plausible on its own,
/// but that stages what no sender would and never finishes it. Step by step,
/// without sockets.
@Suite(.timeLimit(.minutes(5))) struct HostileChunkTests {
    /// Chunk `index` of `count` of a value of `total` bytes of `key`, the peer's (the phone's) at its clock's now.
    static func chunk(_ pair: Pair, key: String, encoding: String, total: Int, index: Int, count: Int, bytes: [UInt8]) -> Frame {
        let version = HLCTimestamp(physicalMilliseconds: pair.phoneClock.nowMilliseconds(), counter: 0, node: pair.phone.nodeID)
        let entry = WireEntry(key: key, version: version, base: .zero, deleted: false, encoding: encoding, value: [])
        return SyncMessage.chunk(.init(entry: entry, totalSize: total, totalChecksum: 0, index: index, count: count,
                                       checksum: Checksum.crc32(bytes), bytes: bytes)).frame()
    }

    /// The first half of thousands of values (family members with long
    /// names), never the second: each stays staged, within
    /// `maxStagedChunkBytes`. The watch's next hello named every one of them,
    /// 8 MiB and more, which no frame carries: the watch's sessions could
    /// never start again, with this phone or any other.
    @Test func transfersAPeerNeverFinishesKeepTheHelloWithinAFrame() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.b.defersAcknowledgementSync = true
        let half = [UInt8](repeating: 1, count: 1024)
        let id = String(repeating: "x", count: 1_000)
        for i in 0..<8_300 {
            _ = link.b.receive(Self.chunk(pair, key: TestKeys.daily["\(i)-\(id)"].name, encoding: "json", total: 2 * half.count,
                                          index: 0, count: 2, bytes: half), now: link.now)
            _ = link.b.takeFramesAwaitingSync()
        }
        #expect(link.b.failure == nil)
        link.a.connectionLost()
        link.b.connectionLost()

        let watch = ReplicationEndpoint(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: "test"))
        let hello = try #require(watch.start(now: 2_000).first)
        #expect(throws: Never.self, "the hello goes in a frame") { _ = try FrameCodec().encode(hello) }
        guard case .hello(let decoded) = try SyncMessage(frame: hello) else {
            Issue.record("the watch's first frame is not its hello")
            return
        }
        #expect(decoded.partialTransfers.count <= ReplicationEndpoint.maxAnnouncedPartialTransfers)
        watch.connectionLost()

        // The pair still syncs.
        try await pair.phone.set(5, for: TestKeys.steps)
        let again = Link(pair.phone, pair.watch)
        again.connect()
        #expect(again.a.failure == nil && again.b.failure == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
    }

}

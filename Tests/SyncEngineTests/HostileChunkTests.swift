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
    /// never start again, with this phone or any other (8,300 of them did
    /// that; 300 show the bound in a fraction of the time).
    @Test func transfersAPeerNeverFinishesKeepTheHelloWithinAFrame() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.b.defersAcknowledgementSync = true
        let half = [UInt8](repeating: 1, count: 1024)
        let id = String(repeating: "x", count: 1_000)
        for i in 0..<300 {
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

    /// A value of 64 KiB announced in 65,536 chunks of a byte. Every sender
    /// cuts chunks of at least 1 KiB (`ReplicationConfiguration.chunkSize`),
    /// but any cut was staged: a row (the key of up to 1 KiB and its fields)
    /// per byte of value, so that `maxStagedChunkBytes` (which counts value
    /// bytes) let the staged chunks take a thousand times more disk, and
    /// every chunk staged scanned them all again.
    @Test func chunksSmallerThanAnySenderCutsAreRefused() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let total = 64 * 1024
        _ = link.b.receive(Self.chunk(pair, key: TestKeys.blob.name, encoding: "data", total: total, index: 0, count: total, bytes: [7]),
                           now: link.now)
        #expect(link.b.failure?.code == .malformedMessage)
        #expect(try pair.watch.stagedChunkBytes() == 0)

        func problem(total: Int, index: Int, count: Int, size: Int) -> String? {
            let entry = WireEntry(key: "k", version: .zero, base: .zero, deleted: false, encoding: "data", value: [])
            return ReplicationEndpoint.chunkProblem(.init(entry: entry, totalSize: total, totalChecksum: 0, index: index, count: count,
                                                          checksum: 0, bytes: [UInt8](repeating: 0, count: size)))
        }
        // What senders cut: chunks of 1 KiB to 1 MiB, the last one shorter.
        #expect(problem(total: 1025, index: 0, count: 2, size: 1024) == nil)
        #expect(problem(total: 1025, index: 1, count: 2, size: 1) == nil)
        #expect(problem(total: 150_000, index: 2, count: 3, size: 150_000 - 2 * 65_536) == nil)
        #expect(problem(total: 3 << 20, index: 2, count: 3, size: 1 << 20) == nil)
        // More chunks than chunks of 1 KiB make.
        #expect(problem(total: 1024, index: 0, count: 2, size: 512) != nil)
        #expect(problem(total: 1025, index: 2, count: 3, size: 1) != nil)
    }
}

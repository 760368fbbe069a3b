import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// `SyncPeer`'s reader decodes each frame beside the session loop and hands
/// the loop the message (`ReplicationEndpoint.receive(_:decoded:now:)`): the
/// same session as decoding in the loop, and a frame that does not decode
/// fails it the same way.
@Suite(.timeLimit(.minutes(5))) struct PredecodedReceiveTests {
    /// Runs a phone and a watch endpoint to quiet, the watch receiving either way; returns what the watch holds.
    private func sync(predecoded: Bool) async throws -> (values: [Int?], sentToPhone: [[UInt8]], applied: Int) {
        let pair = try Pair()
        for day in 1...40 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
        var config = ReplicationConfiguration(pairingEpoch: "predecoded")
        config.maxBatchEntries = 7
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        func toWatch(_ frame: Frame) -> [Frame] {
            predecoded ? watch.receive(frame, decoded: Result { try SyncMessage(frame: frame) }, now: 0) : watch.receive(frame, now: 0)
        }
        var toPhone: [Frame] = [], forWatch: [Frame] = [], sentToPhone: [[UInt8]] = []
        for frame in phone.start(now: 0) { toPhone += toWatch(frame) }
        for frame in watch.start(now: 0) { forWatch += phone.receive(frame, now: 0) }
        while !(toPhone.isEmpty && forWatch.isEmpty) {
            let (p, w) = (toPhone, forWatch)
            (toPhone, forWatch) = ([], [])
            for frame in p {
                sentToPhone.append([frame.type] + frame.payload)
                forWatch += phone.receive(frame, now: 0)
            }
            for frame in w { toPhone += toWatch(frame) }
        }
        #expect(watch.failure == nil && phone.failure == nil)
        let values = try (1...40).map { try pair.watch.storedValue(for: TestKeys.daily["d\($0)"]) }
        return (values, sentToPhone, watch.entriesApplied)
    }

    @Test func aPredecodedFrameIsReceivedAsTheFrameItself() async throws {
        let inLoop = try await sync(predecoded: false)
        let predecoded = try await sync(predecoded: true)
        #expect(predecoded.values == (1...40).map { Optional($0) })
        #expect(predecoded.values == inLoop.values)
        #expect(predecoded.applied == 40 && inLoop.applied == 40)
        // The watch answered the same frames (hello aside, whose node ids differ between pairs: same count and types).
        #expect(predecoded.sentToPhone.map(\.first) == inLoop.sentToPhone.map(\.first))
    }

    @Test func aFrameThatDidNotDecodeFailsTheSessionWithItsError() throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: "predecoded")
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        _ = watch.start(now: 0)
        let garbage = Frame(type: SyncMessage.MessageType.batch.rawValue, payload: [0xFF, 0x01, 0x02])
        let decoded = Result { try SyncMessage(frame: garbage) }
        guard case .failure(let error) = decoded else {
            Issue.record("the garbage batch decoded")
            return
        }
        let replies = watch.receive(garbage, decoded: decoded, now: 0)
        #expect(watch.failure?.code == (error as? SyncError)?.code)
        #expect(watch.failure != nil)
        // The peer is told why (an error message), as when the loop decodes.
        #expect(replies.contains { $0.type == SyncMessage.MessageType.error.rawValue })
        // Once failed, nothing more is handled.
        #expect(watch.receive(garbage, decoded: decoded, now: 0).isEmpty)
    }
}

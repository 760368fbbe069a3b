import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// `ReplicationEndpoint.framesPerPump`: `SyncPeer` pumps one batch at a time,
/// sending each before the next is read and compressed. The session is the
/// one an unbounded pump runs: the same batches, all applied.
@Suite(.timeLimit(.minutes(5))) struct PumpOneFrameAtATimeTests {
    /// Syncs 40 entries in batches of 7 from a phone endpoint pumping `framesPerPump` at a time, pumping
    /// again while it stopped early, as `SyncPeer` does. Returns the values the watch holds, how many
    /// batches went, the most batches one call returned, and whether any call stopped early.
    private func sync(framesPerPump: Int) async throws -> (values: [Int?], batches: Int, mostPerCall: Int, stoppedEarly: Bool) {
        let pair = try Pair()
        for day in 1...40 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
        var config = ReplicationConfiguration(pairingEpoch: "pump")
        config.maxBatchEntries = 7
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        phone.framesPerPump = framesPerPump
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        var batches = 0, mostPerCall = 0, stoppedEarly = false
        func fromPhone(_ frames: [Frame]) -> [Frame] {
            let count = frames.filter { $0.type == SyncMessage.MessageType.batch.rawValue }.count
            batches += count
            mostPerCall = max(mostPerCall, count)
            return frames
        }
        func phoneReceives(_ frame: Frame) -> [Frame] {
            var out = fromPhone(phone.receive(frame, now: 0))
            while phone.pumpStoppedEarly {
                stoppedEarly = true
                out += fromPhone(phone.pump(now: 0))
            }
            return out
        }
        var toPhone: [Frame] = [], forWatch: [Frame] = []
        for frame in fromPhone(phone.start(now: 0)) { toPhone += watch.receive(frame, now: 0) }
        for frame in watch.start(now: 0) { forWatch += phoneReceives(frame) }
        while !(toPhone.isEmpty && forWatch.isEmpty) {
            let (p, w) = (toPhone, forWatch)
            (toPhone, forWatch) = ([], [])
            for frame in p { forWatch += phoneReceives(frame) }
            for frame in w { toPhone += watch.receive(frame, now: 0) }
        }
        #expect(watch.failure == nil && phone.failure == nil)
        let values = try (1...40).map { try pair.watch.storedValue(for: TestKeys.daily["d\($0)"]) }
        return (values, batches, mostPerCall, stoppedEarly)
    }

    @Test func oneBatchPerPumpSendsTheSameBatchesAsOnePumpForTheWindow() async throws {
        let whole = try await sync(framesPerPump: .max)
        let single = try await sync(framesPerPump: 1)
        #expect(single.values == (1...40).map { Optional($0) })
        #expect(whole.values == single.values)
        // 40 entries in batches of 7: six batches either way.
        #expect(whole.batches == 6 && single.batches == 6)
        // The window holds all six: an unbounded pump returns them at once, a bounded one one by one.
        #expect(whole.mostPerCall == 6 && !whole.stoppedEarly)
        #expect(single.mostPerCall == 1 && single.stoppedEarly)
    }

    /// A session that failed while its pump had more to send: the next pump sends
    /// nothing and does not ask to be called again (the loop would spin).
    @Test func aFailedSessionStopsPumping() async throws {
        let pair = try Pair()
        for day in 1...40 { try await pair.phone.set(day, for: TestKeys.daily["d\(day)"]) }
        var config = ReplicationConfiguration(pairingEpoch: "pump")
        config.maxBatchEntries = 7
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        phone.framesPerPump = 1
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        var toWatch = phone.start(now: 0), toPhone: [Frame] = []
        for frame in watch.start(now: 0) { toWatch += phone.receive(frame, now: 0) }
        var rounds = 0
        while !phone.pumpStoppedEarly, rounds < 20 {
            rounds += 1
            for frame in toWatch { toPhone += watch.receive(frame, now: 0) }
            toWatch = []
            for frame in toPhone { toWatch += phone.receive(frame, now: 0) }
            toPhone = []
        }
        #expect(phone.pumpStoppedEarly)
        let garbage = Frame(type: SyncMessage.MessageType.batch.rawValue, payload: [0xFF, 0x01, 0x02])
        _ = phone.receive(garbage, now: 0)
        #expect(phone.failure != nil)
        #expect(phone.pump(now: 0).isEmpty)
        #expect(!phone.pumpStoppedEarly)
    }

    @Test func aBoundBelowOneIsOne() throws {
        let pair = try Pair()
        let phone = ReplicationEndpoint(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "pump"))
        phone.framesPerPump = 0
        #expect(phone.framesPerPump == 1)
    }
}

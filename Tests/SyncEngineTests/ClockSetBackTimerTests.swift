@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A session's timers read the wall clock: one set back (by hand, by a
/// time server) made every wait begun before it last until the clock had
/// caught up again. A jump back now costs at most one more wait.
@Suite(.timeLimit(.minutes(5))) struct ClockSetBackTimerTests {
    static let day: Int64 = 86_400_000

    /// A hello left unanswered over a connection that delivers every frame
    /// fails the session after `helloTimeoutMilliseconds`, clock set back or not.
    @Test func theHelloTimeoutStillFiresAfterTheClockIsSetBack() throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: "test")
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config, retransmits: false)
        let start: Int64 = 10 * Self.day
        #expect(!watch.start(now: start).isEmpty)
        let back = start - Self.day
        _ = watch.tick(now: back)
        #expect(watch.failure == nil)
        _ = watch.tick(now: back + config.helloTimeoutMilliseconds - 1)
        #expect(watch.failure == nil, "a jump back is not a timeout")
        _ = watch.tick(now: back + config.helloTimeoutMilliseconds)
        #expect(watch.failure?.code == .timeout)
    }

    /// The watch waiting for the phone's receipt ends the session after
    /// `receiptTimeoutMilliseconds`, even when its clock went back meanwhile.
    @Test func theReceiptTimeoutStillFiresAfterTheClockIsSetBack() async throws {
        let pair = try Pair()
        try await pair.watch.set(["a"], for: TestKeys.tags)
        var config = ReplicationConfiguration(pairingEpoch: "test")
        config.receiptTimeoutMilliseconds = 4_000
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config, retransmits: false)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config, retransmits: false)
        let start: Int64 = 10 * Self.day
        ReceiptTests.exchange(phone, watch, start: true, now: start) { frame in
            if case .receipt? = try? SyncMessage(frame: frame) { return nil }
            return frame
        }
        try #require(watch.isEstablished && watch.failure == nil)
        _ = watch.tick(now: start)
        let back = start - Self.day
        _ = watch.tick(now: back)
        #expect(watch.failure == nil)
        _ = watch.tick(now: back + config.receiptTimeoutMilliseconds)
        #expect(watch.failure?.code == .timeout)
    }

    /// Over a transport that loses frames, a batch whose acknowledgement was
    /// lost goes again after the retransmit interval, clock set back or not.
    @Test func aLostBatchIsSentAgainAfterTheClockIsSetBack() async throws {
        let pair = try Pair()
        try await pair.phone.set(7, for: TestKeys.steps)
        let config = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        let start: Int64 = 10 * Self.day
        // Everything reaches the watch; nothing the watch answers to the phone's batch comes back.
        var sentBatches = 0
        var toWatch = phone.start(now: start)
        var toPhone = watch.start(now: start)
        for _ in 0..<1_000 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let (sendWatch, sendPhone) = (toWatch, toPhone)
            (toWatch, toPhone) = ([], [])
            for frame in sendWatch {
                if case .batch? = try? SyncMessage(frame: frame) { sentBatches += 1 }
                _ = watch.receive(frame, now: start)
            }
            for frame in sendPhone { toWatch += phone.receive(frame, now: start) }
            if toWatch.isEmpty && toPhone.isEmpty { toWatch = phone.pump(now: start) }
        }
        try #require(sentBatches == 1 && phone.isEstablished)
        #expect(try await pair.watch.get(TestKeys.steps) == 7)
        let back = start - Self.day
        let resent = phone.tick(now: back) + phone.tick(now: back + 60_000)
        #expect(resent.contains { if case .batch? = try? SyncMessage(frame: $0) { true } else { false } },
                "the unacknowledged batch goes again within a minute of the jump back")
    }
}

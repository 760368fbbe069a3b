import Foundation
import Logging
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// A connection that holds back the batches it sends until `release()`
/// (the rest goes through): the peer sees a batch arrive late, as a resend does.
final class BatchHoldingConnection: FrameConnection {
    private let base: InMemoryConnection
    private let held = Mutex<(holding: Bool, frames: [Frame])>((true, []))
    private let heldSink: AsyncStream<Int>.Continuation
    /// How many batches are held, after each one is held back.
    let heldCounts: AsyncStream<Int>

    init(_ base: InMemoryConnection) {
        self.base = base
        (heldCounts, heldSink) = AsyncStream.makeStream(of: Int.self)
    }

    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { false }  // the session retransmits the held batch: time passes in ticks

    func send(_ frame: Frame) async throws {
        let holds = held.withLock { state -> Bool in
            guard state.holding, frame.type == SyncMessage.MessageType.batch.rawValue else { return false }
            state.frames.append(frame)
            heldSink.yield(state.frames.count)
            return true
        }
        if !holds { try await base.send(frame) }
    }

    /// Sends what was held, in order, and stops holding.
    func release() async throws {
        let frames = held.withLock { state -> [Frame] in
            state.holding = false
            defer { state.frames = [] }
            return state.frames
        }
        for frame in frames { try await base.send(frame) }
    }

    func close() async { await base.close() }
}

@Suite(.timeLimit(.minutes(5))) struct IdleEventTests {
    /// The phone's first batch is lost and resent after the retransmit
    /// interval: the watch, which has nothing to send, is idle only once the
    /// resent entries arrived and the phone said it has nothing more.
    @Test func idleComesOnlyAfterThePeersResentEntries() async throws {
        let pair = try Pair()
        for day in 1...3 { try await pair.phone.set(day * 100, for: TestKeys.daily["2026-11-\(day)"]) }
        let link = Link(pair.phone, pair.watch)
        let phone = link.a, watch = link.b
        var now: Int64 = 1_000
        let phoneHello = phone.start(now: now), watchHello = watch.start(now: now)
        var toPhone: [Frame] = []
        var toWatch: [Frame] = []
        for frame in phoneHello { toPhone += watch.receive(frame, now: now) }
        for frame in watchHello { toWatch += phone.receive(frame, now: now) }
        // The link loses the phone's batch; everything else arrives.
        let lost = toWatch.filter { $0.type == SyncMessage.MessageType.batch.rawValue }
        #expect(lost.count == 1)
        toWatch.removeAll { $0.type == SyncMessage.MessageType.batch.rawValue }
        while !(toPhone.isEmpty && toWatch.isEmpty) {
            let (p, w) = (toPhone, toWatch)
            (toPhone, toWatch) = ([], [])
            for frame in p { toWatch += phone.receive(frame, now: now) }
            for frame in w { toPhone += watch.receive(frame, now: now) }
        }
        #expect(watch.isEstablished && phone.isEstablished)
        #expect(try pair.watch.storedValue(for: TestKeys.daily["2026-11-1"]) == nil)
        #expect(!watch.isIdle, "the phone still has entries for the watch")
        #expect(!phone.isIdle)

        // The retransmit: the same entries again.
        now += ReplicationConfiguration().retransmitMilliseconds
        let resent = phone.tick(now: now)
        #expect(resent.map(\.payload) == lost.map(\.payload))
        for frame in resent { toPhone += watch.receive(frame, now: now) }
        #expect(try pair.watch.storedValue(for: TestKeys.daily["2026-11-3"]) == 300)
        #expect(!watch.isIdle, "the phone has not yet said it has nothing more")
        while !(toPhone.isEmpty && toWatch.isEmpty) {
            let (p, w) = (toPhone, toWatch)
            (toPhone, toWatch) = ([], [])
            for frame in p { toWatch += phone.receive(frame, now: now) }
            for frame in w { toPhone += watch.receive(frame, now: now) }
        }
        #expect(watch.isIdle && phone.isIdle)
    }

    /// Over a running session: the watch's `idle` event comes after the
    /// entries the phone sent late, never before.
    @Test func theWatchsIdleEventFollowsTheEntriesItWaitedFor() async throws {
        let pair = try Pair()
        for day in 1...3 { try await pair.phone.set(day, for: TestKeys.daily["2026-11-\(day)"]) }
        let watchEvents = pair.watch.events()
        var config = ReplicationConfiguration(pairingEpoch: "idle")
        config.retransmitMilliseconds = 100
        try await Self.withHeldBatches(pair, config) { _, watchPeer, phoneSide in
            try await first(of: watchEvents, "the watch's connected event") { if case .connected = $0 { true } else { false } }
            // Ticks pass while the phone's batch is held back: it is sent, then resent after a retransmit interval.
            try await first(of: phoneSide.heldCounts, "the phone's batch held back and resent") { $0 >= 2 }
            try await phoneSide.release()
            let event = try await first(of: watchEvents, "the watch's first received or idle event") {
                switch $0 {
                case .idle, .received: true
                default: false
                }
            }
            #expect(event == .received(entries: 3, applied: 3), "idle came before the phone's entries: \(event)")
            try await first(of: watchEvents, "the watch's idle event") { $0 == .idle }
            try await watchPeer.waitUntilIdle(timeout: waitLimit)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.daily["2026-11-3"]) == 3)
    }

    /// What keeps a peer from being idle, asked of its running sessions: the
    /// phone's held batch, the watch's wait for it; nothing once it arrived.
    @Test func aPeerSaysWhatKeepsItsSessionsBusy() async throws {
        let pair = try Pair()
        try await pair.phone.set(1, for: TestKeys.daily["2026-11-1"])
        let phoneEvents = pair.phone.events()
        let config = ReplicationConfiguration(pairingEpoch: "idle")
        #expect(await SyncPeer(store: pair.phone, configuration: config).idleBlockers() == ["no session"])
        try await Self.withHeldBatches(pair, config) { phonePeer, watchPeer, phoneSide in
            try await first(of: phoneEvents, "the phone's connected event") { if case .connected = $0 { true } else { false } }
            try await first(of: phoneSide.heldCounts, "the phone's batch held back") { $0 >= 1 }
            let watchID = String(pair.watch.nodeID, radix: 16)
            // The receipt the phone sent before its batch is acknowledged once the watch synced its WAL for it.
            let phoneBusy = try await withDeadline("the phone's receipt acknowledged") {
                var busy = await phonePeer.idleBlockers()
                while busy.first?.contains("receipt") == true { busy = await phonePeer.idleBlockers() }
                return busy
            }
            #expect(phoneBusy.count == 1 && phoneBusy[0].hasPrefix("session with \(watchID): 1 unacknowledged (batch)"), "\(phoneBusy)")
            // A wait that times out says the same.
            let timedOut = await Result { try await phonePeer.waitUntilIdle(timeout: .milliseconds(50)) }
            guard case .failure(let error as SyncError) = timedOut else { Issue.record("the phone went idle with its batch held"); return }
            #expect(error.code == .timeout && error.message.contains("session with \(watchID): 1 unacknowledged (batch)"), "\(error)")
            // The watch waits for the phone to say it has nothing more (or, a moment earlier, for its hello).
            let watchBusy = await watchPeer.idleBlockers()
            #expect(watchBusy.count == 1 && watchBusy[0].hasPrefix("session with "), "\(watchBusy)")
            try await phoneSide.release()
            try await watchPeer.waitUntilIdle(timeout: waitLimit)
            try await phonePeer.waitUntilIdle(timeout: waitLimit)
            #expect(await phonePeer.idleBlockers().isEmpty)
            #expect(await watchPeer.idleBlockers().isEmpty)
        }
    }

    /// Runs a phone and a watch peer over an in-memory link whose phone side
    /// holds back its batches until released; `body` gets the two peers and
    /// that side while they run, and both stop after it.
    static func withHeldBatches(_ pair: Pair, _ config: ReplicationConfiguration,
                                _ body: (SyncPeer, SyncPeer, BatchHoldingConnection) async throws -> Void) async throws {
        let phonePeer = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(20))
        let watchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let (a, b) = InMemoryConnection.makePair()
        let phoneSide = BatchHoldingConnection(a)
        let tasks = [Task { await phonePeer.run(over: phoneSide) }, Task { await watchPeer.run(over: b) }]
        let outcome = await Result { try await body(phonePeer, watchPeer, phoneSide) }
        await a.close()
        try await withDeadline("both peers to stop") { for task in tasks { _ = await task.value } }
        try outcome.get()
    }

    /// A connection whose other end runs no session (accepted, then never
    /// served: it still answers heartbeats over TCP) is given up once the
    /// hello timeout passes, so that a dialer connects again. Found by
    /// `syncsim fuzz --transport tcp` (seed 5101404): a watch connected to
    /// the phone's listener as the phone restarted waited for good.
    @Test func aSessionGivesUpOnAPeerThatNeverAnswersItsHello() async throws {
        let pair = try Pair()
        var config = ReplicationConfiguration(pairingEpoch: "idle")
        config.helloTimeoutMilliseconds = 300
        let watchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let watchEvents = pair.watch.events()
        let (a, silent) = InMemoryConnection.makePair()
        // The default deadline: at the suite's peak a 20 s one ran out before the
        // session's ticks were scheduled. That the configured 300 ms, not the
        // default 10 s, ended it, the reason says.
        let reason = try await withDeadline("the session to give up on the silent peer") { await watchPeer.run(over: a) }
        #expect(reason.contains("did not answer the hello within 300 ms"), "\(reason)")
        let error = try await first(of: watchEvents, "the watch's error event") { if case .error = $0 { true } else { false } }
        guard case .error(let reported) = error else { return }
        #expect(reported.code == .timeout)
        await silent.close()
    }

    /// A protocol-1 peer sends no caught-up notice: the session still becomes
    /// idle (as before), and no protocol-2 message goes to that peer.
    @Test func aProtocolOnePeerGetsNoNoticeAndStillGoesIdle() throws {
        let pair = try Pair()
        var old = ReplicationConfiguration(pairingEpoch: "test")
        old.protocolRange = 1...1
        let phone = ReplicationEndpoint(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "test"))
        let watch = ReplicationEndpoint(store: pair.watch, configuration: old)
        var toPhone: [Frame] = [], toWatch: [Frame] = []
        for frame in phone.start(now: 0) { toPhone += watch.receive(frame, now: 0) }
        for frame in watch.start(now: 0) { toWatch += phone.receive(frame, now: 0) }
        var sentToOld: [Frame] = []
        while !(toPhone.isEmpty && toWatch.isEmpty) {
            let (p, w) = (toPhone, toWatch)
            (toPhone, toWatch) = ([], [])
            for frame in p { toWatch += phone.receive(frame, now: 0) }
            sentToOld += w
            for frame in w { toPhone += watch.receive(frame, now: 0) }
        }
        #expect(phone.isIdle && watch.isIdle)
        #expect(watch.failure == nil && phone.failure == nil)
        #expect(sentToOld.allSatisfy { $0.type <= SyncMessage.MessageType.rebaseline.rawValue })
    }
}

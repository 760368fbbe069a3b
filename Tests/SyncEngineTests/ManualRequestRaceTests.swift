import Foundation
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A manual request must not be lost between sessions: one handed to a
/// session as it ends (its loop is over, its connection still closing), and
/// one a phone's session still awaits the answer of when a newer session with
/// the same watch replaces it, are asked again in the session that follows.
/// Both were lost: `requestManualChanges()` counted the ending session, and the
/// replaced session noted its request only after the newer one had looked.
@Suite(.timeLimit(.minutes(5))) struct ManualRequestRaceTests {
    static func peers(_ pair: Pair) -> (phone: SyncPeer, watch: SyncPeer) {
        let secret = PairingSecret.generate()
        return (SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch), tickInterval: .milliseconds(50)),
                SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch), tickInterval: .milliseconds(50)))
    }

    @Test func aRequestMadeAsItsSessionEndsIsAskedAgainInTheNext() async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)  // manual
        let (phone, watch) = Self.peers(pair)
        let watchEvents = pair.watch.events()

        let (a, b) = InMemoryConnection.makePair()
        let slow = SlowClosingConnection(b)
        let first = [Task { await phone.run(over: a) }, Task { await watch.run(over: slow) }]
        try await watch.waitUntilIdle(timeout: waitLimit)
        await a.close()
        // The watch's loop is over; its session still closes the connection.
        try await withDeadline("the watch's session to close its connection") { await slow.closeCalled.wait() }
        watch.requestManualChanges()
        slow.letClose.open()
        try await withDeadline("the first session to end") { for task in first { _ = await task.value } }

        let (c, d) = InMemoryConnection.makePair()
        let second = [Task { await phone.run(over: c) }, Task { await watch.run(over: d) }]
        let outcome = await Result {
            try await SyncEngineTests.first(of: watchEvents, "the answer to the request asked again",
                                            where: ManualRequestTests.isAnswer)
        }
        await c.close()
        try await withDeadline("the second session to end") { for task in second { _ = await task.value } }
        #expect(try outcome.get() == .manualRequestAnswered(accepted: true, released: 1))
        try await eventually(pair.watch, "the phone's manual change") { try pair.watch.storedValue(for: TestKeys.name) == "Ada" }
    }

    @Test func aRequestOfASessionReplacedByANewerOneIsAskedAgainInIt() async throws {
        let pair = try Pair()
        try await pair.watch.set("Ada", for: TestKeys.name)  // manual
        let (phone, watch) = Self.peers(pair)
        let phoneEvents = pair.phone.events()

        // The phone's first connection goes half-open as its request is sent: the request
        // never arrives, and the phone never hears the watch's end of it close.
        let (a, b) = InMemoryConnection.makePair()
        let halfOpen = HalfOpenConnection(a)
        let phoneFirst = Task { await phone.run(over: halfOpen) }
        let watchFirst = Task { await watch.run(over: b) }
        try await phone.waitUntilIdle(timeout: waitLimit)
        #expect(phone.requestManualChanges() == 1)
        try await withDeadline("the request to vanish") { await halfOpen.swallowed.wait() }
        await b.close()
        try await withDeadline("the watch's first session to end") { _ = await watchFirst.value }

        // The watch redials: the newer session replaces the phone's stale one.
        let (c, d) = InMemoryConnection.makePair()
        let second = [Task { await phone.run(over: c) }, Task { await watch.run(over: d) }]
        let outcome = await Result {
            try await SyncEngineTests.first(of: phoneEvents, "the answer to the request asked again",
                                            where: ManualRequestTests.isAnswer)
        }
        await c.close()
        await halfOpen.close()
        try await withDeadline("every session to end") {
            _ = await phoneFirst.value
            for task in second { _ = await task.value }
        }
        #expect(try outcome.get() == .manualRequestAnswered(accepted: true, released: 1))
    }
}

/// A one-shot signal for tests.
final class TestLatch: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// A connection whose `close()` waits until the test lets it.
final class SlowClosingConnection: FrameConnection {
    private let base: InMemoryConnection
    let closeCalled = TestLatch()
    let letClose = TestLatch()

    init(_ base: InMemoryConnection) { self.base = base }

    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { base.deliversEveryFrame }
    func send(_ frame: Frame) async throws { try await base.send(frame) }

    func close() async {
        closeCalled.open()
        await letClose.wait()
        await base.close()
    }
}

/// A connection that goes half-open as a manual request is sent: that frame
/// and every one after it vanish, and the other end's close is never seen
/// (its inbound ends only with this end's own `close()`).
final class HalfOpenConnection: FrameConnection {
    private let base: InMemoryConnection
    private let cut = Mutex(false)
    let swallowed = TestLatch()
    let inbound: AsyncThrowingStream<Frame, any Error>
    private let continuation: AsyncThrowingStream<Frame, any Error>.Continuation
    private let forwarder: Task<Void, Never>

    init(_ base: InMemoryConnection) {
        self.base = base
        let (inbound, continuation) = AsyncThrowingStream.makeStream(of: Frame.self)
        (self.inbound, self.continuation) = (inbound, continuation)
        forwarder = Task {
            do { for try await frame in base.inbound { continuation.yield(frame) } } catch {}
        }
    }

    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { base.deliversEveryFrame }

    func send(_ frame: Frame) async throws {
        let vanishes = cut.withLock { cut -> Bool in
            if frame.type == SyncMessage.MessageType.manualRequest.rawValue { cut = true }
            return cut
        }
        if vanishes {
            swallowed.open()
            return
        }
        try await base.send(frame)
    }

    func close() async {
        continuation.finish()
        forwarder.cancel()
        await base.close()
    }
}

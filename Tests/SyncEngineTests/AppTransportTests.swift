import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// `FrameConnection`s an app writes itself (over WatchConnectivity, say), as
/// the protocol lets them behave.
@Suite(.timeLimit(.minutes(5))) struct AppTransportTests {
    /// A connection whose `send` waits for room that never comes (the peer is
    /// not reachable, its buffer full) and throws once the connection is
    /// closed, as `FrameConnection.send` says: "suspends while the outbound
    /// buffer is full; throws once the connection is closed". It ignores
    /// cancellation (the protocol does not ask for it).
    final class StalledSendConnection: FrameConnection {
        private struct State {
            var closed = false
            var waiting: [CheckedContinuation<Void, Never>] = []
        }

        private let state = Mutex(State())
        let inbound: AsyncThrowingStream<Frame, any Error>
        private let inboundContinuation: AsyncThrowingStream<Frame, any Error>.Continuation
        /// Yields once each time `send` begins to wait.
        let sendsWaiting: AsyncStream<Void>
        private let sendWaits: AsyncStream<Void>.Continuation
        let peerDescription = "app:stalled"
        var statistics: ConnectionStatistics { ConnectionStatistics() }
        var deliversEveryFrame: Bool { true }

        init() {
            (inbound, inboundContinuation) = AsyncThrowingStream.makeStream()
            (sendsWaiting, sendWaits) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
        }

        func send(_ frame: Frame) async throws {
            await withCheckedContinuation { continuation in
                let closed = state.withLock { state -> Bool in
                    if !state.closed { state.waiting.append(continuation) }
                    return state.closed
                }
                if closed { continuation.resume() } else { sendWaits.yield() }
            }
            throw TransportError(.closed, "the app connection is closed")
        }

        func close() async {
            let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.closed = true
                defer { state.waiting = [] }
                return state.waiting
            }
            for continuation in waiting { continuation.resume() }
            inboundContinuation.finish()
        }
    }

    func stalledSession(_ pair: Pair) async throws -> (Task<String, Never>, StalledSendConnection) {
        let peer = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pair.pairing.epoch))
        let connection = StalledSendConnection()
        let session = Task { await peer.run(over: connection) }
        try await withDeadline("the session's first send to wait") {
            for await _ in connection.sendsWaiting { return }
        }
        return (session, connection)
    }

    /// Before: a session whose `send` waited (an app transport's backpressure)
    /// never ended when its store closed: the store's close was an input the
    /// session loop, suspended in `send`, never read, and the connection was
    /// closed only after the loop ended. `run(over:)` never returned, though
    /// "it runs until the connection closes or fails, or the store closes".
    @Test func closingTheStoreEndsASessionWhoseSendWaits() async throws {
        let pair = try Pair()
        let (session, _) = try await stalledSession(pair)
        pair.phone.close()
        let reason = try await withDeadline("the session to end as its store closed") { await session.value }
        #expect(reason.contains("closed"))
    }

    /// Before: cancelling the task that runs a session whose `send` waits (and
    /// does not heed cancellation, which the protocol does not ask of it)
    /// never ended the session: the connection was closed only after the
    /// session loop, suspended in `send`, ended.
    @Test func cancellingEndsASessionWhoseSendWaits() async throws {
        let pair = try Pair()
        let (session, _) = try await stalledSession(pair)
        session.cancel()
        _ = try await withDeadline("the cancelled session to end") { await session.value }
    }

    /// An in-memory connection whose `send`, once `stall()` was called, waits
    /// until the connection is closed (the peer went out of reach), as
    /// `StalledSendConnection`'s does.
    final class StallingConnection: FrameConnection {
        private let base: InMemoryConnection
        private let stalled = StalledSendConnection()
        private let stalls = Atomic(false)
        init(_ base: InMemoryConnection) { self.base = base }
        var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }
        var sendsWaiting: AsyncStream<Void> { stalled.sendsWaiting }
        var peerDescription: String { base.peerDescription }
        var statistics: ConnectionStatistics { base.statistics }
        var deliversEveryFrame: Bool { true }
        func stall() { stalls.store(true, ordering: .sequentiallyConsistent) }

        func send(_ frame: Frame) async throws {
            if stalls.load(ordering: .sequentiallyConsistent) { try await stalled.send(frame) } else { try await base.send(frame) }
        }

        func close() async {
            await stalled.close()
            await base.close()
        }
    }

    /// Before: a session whose `send` waited for a peer gone out of reach (a
    /// stale connection, what replacing is for) was told to end when a newer
    /// session with the same peer began, but never read that, suspended in
    /// `send`: it ran on beside the newer one for as long as its connection
    /// lived.
    @Test func aReplacedSessionWhoseSendWaitsEnds() async throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: "replace")
        let phonePeer = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(20))
        let oldWatchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let newWatchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let (phoneOldBase, watchOld) = InMemoryConnection.makePair()
        let phoneOld = StallingConnection(phoneOldBase)
        let phoneOldSession = Task { await phonePeer.run(over: phoneOld) }
        let watchOldSession = Task { await oldWatchPeer.run(over: watchOld) }
        try await phonePeer.waitUntilIdle(timeout: waitLimit)
        phoneOld.stall()
        try pair.phone.setNow(7, for: TestKeys.steps)
        try await withDeadline("the old session's send to wait") {
            for await _ in phoneOld.sendsWaiting { return }
        }

        let (phoneNew, watchNew) = InMemoryConnection.makePair()
        let phoneNewSession = Task { await phonePeer.run(over: phoneNew) }
        let watchNewSession = Task { await newWatchPeer.run(over: watchNew) }
        let reason = await Result {
            try await withDeadline("the phone's replaced session to end") { await phoneOldSession.value }
        }
        await phoneOld.close()
        await phoneNew.close()
        try await withDeadline("every session to end") {
            _ = await (phoneOldSession.value, watchOldSession.value, phoneNewSession.value, watchNewSession.value)
        }
        let why = try reason.get()
        #expect(why.contains("replaced by a newer session with the same peer"), "\(why)")
    }
}

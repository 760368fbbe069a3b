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
}

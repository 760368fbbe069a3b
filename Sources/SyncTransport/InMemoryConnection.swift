import Synchronization

/// A connection whose two ends live in the same process, joined by async
/// streams. No faults, no delay: for tests and for running the engine's live
/// shell without sockets. (Fault injection with virtual time is `SimulatedLink`.)
public final class InMemoryConnection: FrameConnection {
    private struct State {
        var closed = false
        var stats = ConnectionStatistics()
    }

    public let inbound: AsyncThrowingStream<Frame, any Error>
    private let inboundContinuation: AsyncThrowingStream<Frame, any Error>.Continuation
    private let state = Mutex(State())
    private let peerBox = Mutex<InMemoryConnection?>(nil)
    public let peerDescription: String
    /// No faults: every frame arrives, in order.
    public var deliversEveryFrame: Bool { true }

    private init(name: String) {
        (inbound, inboundContinuation) = AsyncThrowingStream.makeStream()
        peerDescription = name
    }

    /// Makes two connected ends: what one sends, the other receives.
    public static func makePair() -> (InMemoryConnection, InMemoryConnection) {
        let a = InMemoryConnection(name: "memory:b")
        let b = InMemoryConnection(name: "memory:a")
        a.peerBox.withLock { $0 = b }
        b.peerBox.withLock { $0 = a }
        return (a, b)
    }

    /// Refuses a type outside `0x01...0xEF` as TCP does (`.protocolViolation`,
    /// nothing delivered, the connection stays open): a test over this link
    /// fails where TCP would.
    public func send(_ frame: Frame) async throws {
        try Frame.checkApplicationType(frame.type)
        let closed = state.withLock { $0.closed }
        guard !closed, let peer = peerBox.withLock({ $0 }) else {
            throw TransportError(.closed, "the in-memory connection is closed")
        }
        let size = frame.payload.count + FrameEnvelope.headerSize
        state.withLock {
            $0.stats.framesSent += 1
            $0.stats.bytesSent += size
            $0.stats.payloadBytesSent += frame.payload.count
        }
        peer.deliver(frame, size: size)
    }

    private func deliver(_ frame: Frame, size: Int) {
        let closed = state.withLock { s -> Bool in
            if !s.closed {
                s.stats.framesReceived += 1
                s.stats.bytesReceived += size
            }
            return s.closed
        }
        if !closed { inboundContinuation.yield(frame) }
    }

    public func close() async {
        closeLocally()
        let peer = peerBox.withLock { p -> InMemoryConnection? in
            let old = p
            p = nil
            return old
        }
        peer?.closeLocally()
    }

    private func closeLocally() {
        let wasClosed = state.withLock { s -> Bool in
            let was = s.closed
            s.closed = true
            return was
        }
        if !wasClosed { inboundContinuation.finish() }
    }

    public var statistics: ConnectionStatistics { state.withLock { $0.stats } }
}

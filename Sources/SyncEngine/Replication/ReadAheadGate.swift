import Synchronization

/// Bounded read-ahead between a connection's reader and the replication loop:
/// the reader takes a credit per frame and the loop returns it once the frame
/// is applied, so a slow store makes the socket (and the sender) wait instead
/// of frames piling up in memory.
///
/// A lock, not an actor: taking a free credit and returning one never
/// suspend, so neither the reader nor the loop hops to another executor per frame.
/// (A counting semaphore, first come first served: the simulator bounds its
/// concurrent runs with one too.)
@_spi(Testing) public final class ReadAheadGate: Sendable {
    private struct State {
        var credits: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var isOpen = true
    }

    private let state: Mutex<State>

    public init(credits: Int) { state = Mutex(State(credits: credits)) }

    /// How many wait for a credit now.
    public var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// Takes a credit, waiting for one while none is left (never once the gate is open).
    public func acquire() async {
        let taken = state.withLock { s -> Bool in
            guard s.isOpen, s.credits <= 0 else {
                if s.isOpen { s.credits -= 1 }
                return true
            }
            return false
        }
        if taken { return }
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { s -> Bool in
                // Released or opened between the check and here: go on.
                guard s.isOpen, s.credits <= 0 else {
                    if s.isOpen { s.credits -= 1 }
                    return true
                }
                s.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Returns a credit, or hands it to the reader waiting for one.
    public func release() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.credits += 1
                return nil
            }
            return s.waiters.removeFirst()
        }
        waiter?.resume()
    }

    /// Lets every waiting and future reader through (the session is over).
    public func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.isOpen = false
            defer { s.waiters.removeAll() }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

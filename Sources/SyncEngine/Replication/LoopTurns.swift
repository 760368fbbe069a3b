import Synchronization

/// The turns a peer's session loops took (`SyncPeer.sessionLoopTurns`), and
/// the callers waiting for more of them (tests: instead of polling).
final class LoopTurns: Sendable {
    private let count = Atomic<Int>(0)
    /// Whether someone waits: a turn then looks at `waiters` (else one load more).
    private let waiting = Atomic<Bool>(false)
    private let waiters = Mutex<[(after: Int, continuation: CheckedContinuation<Void, Never>)]>([])

    var value: Int { count.load(ordering: .relaxed) }

    /// Counts a turn, and lets go whoever waited for it.
    func add() {
        count.add(1, ordering: .sequentiallyConsistent)
        // Sequentially consistent with `wait`: either it sees this turn, or this sees it waiting.
        guard waiting.load(ordering: .sequentiallyConsistent) else { return }
        let ready = waiters.withLock { waiters -> [CheckedContinuation<Void, Never>] in
            let now = count.load(ordering: .sequentiallyConsistent)
            let ready = waiters.filter { $0.after < now }.map(\.continuation)
            waiters.removeAll { $0.after < now }
            if waiters.isEmpty { waiting.store(false, ordering: .sequentiallyConsistent) }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    /// Returns once more than `turns` turns were taken in all.
    func wait(exceeding turns: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let reached = waiters.withLock { waiters -> Bool in
                waiting.store(true, ordering: .sequentiallyConsistent)
                guard count.load(ordering: .sequentiallyConsistent) <= turns else {
                    if waiters.isEmpty { waiting.store(false, ordering: .sequentiallyConsistent) }
                    return true
                }
                waiters.append((turns, continuation))
                return false
            }
            if reached { continuation.resume() }
        }
    }
}

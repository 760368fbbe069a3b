import Dispatch
import Foundation
@testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// Queued delivery's rounds (`SyncPeer.runQueued`) do their blocking file
/// I/O (mailbox writes, `fsync`s) off Swift concurrency's cooperative pool,
/// whose few threads (one a core) every other task of the app needs.
@Suite(.timeLimit(.minutes(5))) struct QueuedOffPoolTests {
    /// More rounds than the pool has threads, each held inside its mailbox
    /// post's file write (as an `fsync` of seconds on a loaded disk holds it):
    /// another task still runs, and once the writes go on every message is
    /// posted. Before, each round held a thread of the pool while it wrote,
    /// and the pool ran nothing else until the writes were let go.
    @Test func roundsHeldInTheirFileWritesLeaveTheCooperativePoolFree() async throws {
        // One round more than the pool's threads (one a core): each held write held one of them before.
        let rounds = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: rounds)
        // Whatever happens, the writes are let go in the end: the test fails, it never hangs.
        hold.releaseAtTheLatest(after: 60)
        var pairs: [Pair] = []
        var peers: [(peer: SyncPeer, box: Mailbox)] = []
        let folders = (0..<rounds).map { _ in TempFolder() }
        for folder in folders {
            let pair = try Pair()
            try pair.phone.setNow(7, for: TestKeys.steps)
            let (phone, phoneBox, _, _) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
            phoneBox.beforeWritingHook.withLock { $0 = { _ in hold.hold() } }
            pairs.append(pair)
            peers.append((phone, phoneBox))
        }
        let running = peers.map { peer, box in Task { await peer.runQueued(through: box) } }

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(rounds) queued rounds held in their mailbox writes kept every other task from running: they block the cooperative pool")

        for task in running { task.cancel() }
        for task in running { await task.value }
        // Nothing was lost to the wait: each phone's change is posted, once.
        for (peer, box) in peers {
            #expect(try QueuedDeliveryTests().queuedKeys(box) == [TestKeys.steps.name], "the outbox of \(peer.store.path)")
        }
        // An optimized build ends a local's lifetime at its last use: the folders (removed as
        // they go) and the stores must outlive the rounds, which use them through the peers.
        withExtendedLifetime((pairs, folders)) {}
    }

    /// A phone with more watches than the pool has threads, a mailbox each:
    /// while a round of one mailbox is held in its write (run by the app on a
    /// thread of its own), a local write wakes the other mailboxes' loops,
    /// which ask whether a live session sends it (`isLive`): they do not wait
    /// for that round. Before, each waited on the lock the held round kept, on
    /// a thread of the pool, and the pool ran nothing else.
    @Test func aHeldRoundOfOneMailboxKeepsNoOtherLoopWaiting() async throws {
        let loops = ProcessInfo.processInfo.activeProcessorCount + 1
        let pair = try Pair()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "unused"))
        let folders = (0...loops).map { _ in TempFolder() }
        let boxes = try folders.map { try Mailbox(directory: $0.path, role: .phone, secret: PairingSecret.generate()) }
        let (held, others) = (boxes[0], Array(boxes.dropFirst()))
        try pair.phone.setNow(1, for: TestKeys.steps)

        // The other loops' first rounds post the change; then they wait for a local write (their timer is an hour).
        let waits = pair.phone.timedWaits.subscribe()
        let running = others.map { box in Task { await phone.runQueued(through: box, pollInterval: .seconds(3600), quietPollInterval: .seconds(3600)) } }
        var rounds = 0
        while rounds < loops {
            if case .queuedRound = try await first(of: waits, "the loops' first rounds") { rounds += 1 }
        }

        let hold = CallHold(count: 1)
        hold.releaseAtTheLatest(after: 60)
        held.beforeWritingHook.withLock { $0 = { _ in hold.hold() } }
        let (heldRoundEnded, endHeldRound) = AsyncStream.makeStream(of: Void.self)
        Thread.detachNewThread {
            _ = try? phone.deliverQueued(through: held)
            endHeldRound.finish()
        }
        await hold.allHeld()
        let checks = CallHold(count: loops)
        phone.liveCheckHook.withLock { $0 = { checks.pass() } }
        try pair.phone.setNow(2, for: TestKeys.steps)
        // Every loop asked whether the write goes live (more loops than the pool has threads).
        await checks.allHeld()
        await Task.detached {}.value
        let outcome = hold.settle(.ranBeside)
        hold.release()
        #expect(outcome == .ranBeside,
                "\(loops) mailbox loops kept every other task from running while another mailbox's round was held: they wait for it on the cooperative pool")

        for await _ in heldRoundEnded {}
        for task in running { task.cancel() }
        for task in running { await task.value }
        // Nothing was lost: each mailbox carries both writes (the held round read the second once let go).
        for box in boxes {
            #expect(try QueuedDeliveryTests().queuedKeys(box) == [TestKeys.steps.name, TestKeys.steps.name], "\(box.directory)")
        }
        withExtendedLifetime((pair, folders)) {}  // past the rounds, in an optimized build too
    }
}

/// Holds the calls (mailbox writes, syncs) that reach it until `release()`, and tells when
/// `count` of them are held. Bounded: a timer releases them at the latest.
final class CallHold: Sendable {
    enum Outcome: Sendable, Equatable {
        /// The test went on while the writes were held.
        case ranBeside
        /// The timer let the writes go first: nothing else ran meanwhile.
        case timedOut
    }

    private struct State {
        var held = 0
        var released = false
        var waiter: CheckedContinuation<Void, Never>?
        var outcome: Outcome?
    }

    private let count: Int
    private let state = Mutex(State())
    private let gate = DispatchSemaphore(value: 0)
    /// A queue of its own (never a thread of the pool the test watches).
    private let timer = DispatchQueue(label: "QueuedOffPoolTests.release")

    init(count: Int) { self.count = count }

    /// The hook: blocks the calling write until `release()` (lets it through once released).
    func hold() {
        let (blocks, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !state.released else { return (false, nil) }
            state.held += 1
            guard state.held == count else { return (true, nil) }
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume()
        if blocks { gate.wait() }
    }

    /// Counts the call as `hold()` does, but never blocks it.
    func pass() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.held += 1
            guard state.held == count else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once `count` writes are held, or they were released.
    func allHeld() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard !state.released, state.held < count else { return true }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Once every call is held, whether another task still got a thread of
    /// the pool (a task run beside them; the test's own task needs one to go
    /// on): settles the outcome, then lets the calls go.
    func taskRunsBesideTheHeldCalls() async -> Outcome {
        await allHeld()
        await Task.detached {}.value
        let outcome = settle(.ranBeside)
        release()
        return outcome
    }

    /// The test's outcome, unless the timer settled it first: the first one stays.
    func settle(_ outcome: Outcome) -> Outcome {
        state.withLock { state in
            let settled = state.outcome ?? outcome
            state.outcome = settled
            return settled
        }
    }

    /// Lets the held writes go on, and every later one through.
    func release() {
        let (held, waiter) = state.withLock { state -> (Int, CheckedContinuation<Void, Never>?) in
            guard !state.released else { return (0, nil) }
            state.released = true
            defer { state.waiter = nil }
            return (state.held, state.waiter)
        }
        for _ in 0..<held { gate.signal() }
        waiter?.resume()
    }

    /// Settles the outcome as `.timedOut` and releases the writes after `seconds`, unless the test settled it.
    func releaseAtTheLatest(after seconds: Int) {
        timer.asyncAfter(deadline: .now() + .seconds(seconds)) {
            if self.settle(.timedOut) == .timedOut { self.release() }
        }
    }
}

import Dispatch
import Foundation
import Synchronization

/// Commits a large `WriteBatch` while the app is still filling it: at every
/// `chunkSize` writes, the body's thread checks the chunk and prepares its
/// rows (the current state of each key read on a reader connection), and a
/// helper thread, which holds the batch's one transaction, gives them
/// versions and saves them while the next chunk is collected, on the other
/// core. The transaction commits when the body returns, or rolls back
/// (nothing written) when it throws.
///
/// The write lock is held from the first chunk until then. Anything on the
/// body's own thread that needs the writer connection (a nested write, a
/// read on the writer) first stops the hand-off: the helper rolls back,
/// and the whole batch commits when the body returns, as a batch of fewer
/// than `chunkSize` writes always does.
final class BulkWritePipeline: Sendable {
    /// Writes per chunk handed off; a batch with fewer never starts the helper.
    static let chunkSize = 2048

    enum Ending {
        /// The helper committed everything: what is left to do outside the transaction.
        case committed(LocalCommitOutcome)
        /// Nothing was committed: these are the batch's writes, in order, to commit as one.
        case commitTogether([BackendWrite])
    }

    private struct State {
        /// Chunks prepared that the helper has not taken yet.
        var queued: [PreparedLocalRows] = []
        /// Every write handed off, in order: what the batch commits if the hand-off stops.
        var handed: [[BackendWrite]] = []
        var started = false
        /// Whether the body's thread has seen the helper take the write lock (or fail).
        var sawLock = false
        var finished = false
        var stopped = false
        /// The first write refused by the checks, or a failed read (on the body's thread): nothing commits.
        var refused: (any Error)?
        /// Set by the helper when it is done (committed, rolled back or failed).
        var result: Result<LocalCommitOutcome, any Error>?
    }

    /// What the helper does next inside its transaction.
    enum Step { case write(PreparedLocalRows), commit, rollBack }

    private let state = Mutex(State())
    /// Signalled once per chunk, at the end and at a stop.
    private let work = DispatchSemaphore(value: 0)
    /// Signalled by the helper when it is done.
    private let done = DispatchSemaphore(value: 0)
    /// Signalled by the helper once it holds the write lock (or has failed to take it).
    private let locked = DispatchSemaphore(value: 0)
    /// What the chunks prepared so far leave for the next (the body's thread only).
    private let preparation = Mutex(LocalRowPreparation())
    private let store: SyncStore
    /// The thread running the batch's body (the one whose own writes stop the hand-off).
    private let bodyThread = ObjectIdentifier(Thread.current)

    init(store: SyncStore) {
        self.store = store
    }

    /// Hands `writes` (the next chunk, in order) to the helper, starting it on the first.
    func handOff(_ writes: [BackendWrite]) {
        let (active, start) = state.withLock { s in
            s.handed.append(writes)
            defer { s.started = true }
            return (!s.stopped && s.refused == nil && s.result == nil, !s.started)
        }
        guard active else { return }
        if start {
            store.database.claimWriter(for: bodyThread) { [weak self] in self?.stop() }
            let thread = Thread { [self] in runHelper() }
            thread.name = "SyncEngine bulk write"
            thread.start()
        }
        queue(writes)
    }

    /// Checks and prepares `writes` on the body's thread, which has time to
    /// spare (the helper's part is the longer one), and queues them.
    private func queue(_ writes: [BackendWrite]) {
        let prepared = Result { () throws -> PreparedLocalRows? in
            let descriptors = try store.checkedDescriptors(writes)
            // The state of each key must be read once nothing else can commit: after the helper took the lock.
            if !state.withLock({ $0.sawLock }) {
                locked.wait()
                state.withLock { $0.sawLock = true }
            }
            guard state.withLock({ $0.result == nil }) else { return nil }
            return try preparation.withLock { preparation in
                try store.prepareLocalRows(writes, descriptors: descriptors, preparation: &preparation,
                                           loadRows: { keys in try store.database.readCommitted { try store.loadRows($0, keys: keys, valueFile: .ifReadable) } },
                                           loadRow: { key in try store.database.readCommitted { try store.loadRow($0, key: key, valueFile: .ifReadable) } })
            }
        }
        state.withLock { s in
            guard !s.stopped, s.refused == nil, s.result == nil else { return }
            switch prepared {
            case .success(let rows?): s.queued.append(rows)
            case .success(nil): break
            case .failure(let error): s.refused = error
            }
        }
        work.signal()
    }

    /// Stops the hand-off: the helper rolls back what it wrote and releases
    /// the write lock before this returns; the batch commits as a whole at its
    /// end (or not at all, when its body threw).
    func stop() {
        let wait = state.withLock { s -> Bool in
            guard !s.stopped else { return false }
            s.stopped = true
            return s.started && s.result == nil
        }
        if wait {
            work.signal()
            done.wait()
        }
        store.database.releaseWriter(for: bodyThread)
    }

    /// Ends the batch after its body returned: hands `rest` over and waits for
    /// the commit. Throws the first write refused, or what the helper threw (a full disk).
    func finish(rest: [BackendWrite]) throws -> Ending {
        if let handed = state.withLock({ s in s.started && !s.stopped ? nil : s.handed }) {
            return .commitTogether(handed.flatMap { $0 } + rest)
        }
        if !rest.isEmpty { queue(rest) }
        state.withLock { $0.finished = true }
        work.signal()
        done.wait()
        store.database.releaseWriter(for: bodyThread)
        let (refused, result) = state.withLock { s in (s.refused, s.result) }
        if let refused { throw refused }
        return .committed(try result!.get())
    }

    private func runHelper() {
        let result = Result { try store.commitLocalInChunks(began: { locked.signal() }, next: nextStep) }
        state.withLock { $0.result = result }
        // For a body still waiting to see the lock taken, when it never was.
        locked.signal()
        done.signal()
    }

    /// The helper's next step, waiting for it.
    private func nextStep() -> Step {
        while true {
            let step = state.withLock { s -> Step? in
                if s.stopped || s.refused != nil { return .rollBack }
                if !s.queued.isEmpty { return .write(s.queued.removeFirst()) }
                return s.finished ? .commit : nil
            }
            if let step { return step }
            work.wait()
        }
    }

    /// Thrown inside the helper's transaction to roll it back when the hand-off stops.
    struct Stopped: Error {}
}

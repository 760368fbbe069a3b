import Dispatch

/// Where a live session's loop runs (`SyncPeer.run(over:)`) when its store's
/// durability is `.full`: a serial dispatch queue of its own, not Swift
/// concurrency's cooperative pool. The loop applies what arrives and commits
/// with an `fsync` each (seconds on a busy disk), which would otherwise hold
/// one of the pool's few threads (one a core) that every other task of the
/// app needs. Its jobs run one at a time, in the order they are enqueued.
final class SessionExecutor: TaskExecutor {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

import Dispatch

/// Where a live session's loop runs (`SyncPeer.run(over:)`) when its store's
/// applies wait for the disk (durability `.full`, values in files): a serial
/// dispatch queue of its own, not Swift concurrency's cooperative pool. The
/// loop applies what arrives with an `fsync` each (seconds on a busy disk),
/// which would otherwise hold one of the pool's few threads (one a core)
/// that every other task of the app needs. Its jobs run one at a time, in
/// the order they are enqueued.
final class SessionExecutor: TaskExecutor {
    private let queue: DispatchQueue

    /// An executor for a session loop of `store` when its applies wait for the
    /// disk; nil (the cooperative pool) when its commits do not: there the hop
    /// onto a queue for every frame cost a third more time per write.
    static func forLoop(of store: SyncStore) -> SessionExecutor? {
        let waitsForDisk = store.options.durability == .full || !store.valueStorage.keepsValuesInRows
        return waitsForDisk ? SessionExecutor(label: "SyncEngine.SyncPeer.session") : nil
    }

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

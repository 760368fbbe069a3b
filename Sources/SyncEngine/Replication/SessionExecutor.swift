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
        appliesWaitForDisk(store) ? SessionExecutor(label: "SyncEngine.SyncPeer.session") : nil
    }

    /// Whether `store`'s commits wait for the disk (an `fsync` each).
    static func appliesWaitForDisk(_ store: SyncStore) -> Bool {
        store.options.durability == .full || !store.valueStorage.keepsValuesInRows
    }

    /// Runs `work` where it is called, unless the loop runs on the pool
    /// (`onPool`) and either another thread holds `store`'s writer at this
    /// moment (an app's large batch, another watch's apply) or `blocks` (a
    /// handshake: it records its peer, may sync the WAL, and may take queued
    /// batches back from the mailboxes, waiting for a round that posts and
    /// syncing each spool): then on `spare`, made on first need, so that the
    /// wait holds no thread of the pool. The common case costs one load; a
    /// hop only when it would wait.
    static func awayFromABusyWriter<T>(_ store: SyncStore, onPool: Bool, blocks: Bool = false, spare: inout SessionExecutor?,
                                        _ work: () async throws -> T) async rethrows -> T {
        guard onPool, blocks || store.database.writerIsBusy else { return try await work() }
        let executor = spare ?? SessionExecutor(label: "SyncEngine.SyncPeer.writerWait")
        spare = executor
        return try await withTaskExecutorPreference(executor) { try await work() }
    }

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

import Foundation
import Synchronization

/// At most one store replicates a store file at a time, so the peer never
/// sees two sessions for one device: not two processes (an app and its
/// extension may both open the file), nor two `SyncStore`s of one process.
/// Across processes it is an advisory `flock` on `<store>.sync-lock` (beside
/// the file's path with its symbolic links resolved, as SQLite opens it);
/// within one, the files held are known by device and inode, so any spelling
/// of a path is the same file. The sessions of one store share its hold,
/// released when the last one ends (closing the store ends them) or the
/// process dies.
enum ReplicationLock {
    /// A store file by identity, whatever path it was opened by.
    private struct FileID: Hashable {
        var device: UInt64
        var inode: UInt64

        /// The file at `path`, symbolic links followed; nil (`errno` set) when it cannot be looked up.
        init?(path: String) {
            var info = stat()
            guard stat(path, &info) == 0 else { return nil }
            device = UInt64(truncatingIfNeeded: info.st_dev)
            inode = UInt64(truncatingIfNeeded: info.st_ino)
        }
    }

    private struct Held {
        /// The store whose sessions hold it: each session keeps the store alive.
        var store: ObjectIdentifier
        var descriptor: Int32
        var sessions: Int
    }

    private static let held = Mutex<[FileID: Held]>([:])

    /// Beside the file `storePath` names, symbolic links resolved: every
    /// process on the file meets there, whatever path it opened it by.
    static func lockPath(for storePath: String) -> String {
        guard let resolved = realpath(storePath, nil) else {
            return URL(fileURLWithPath: storePath).standardizedFileURL.path + ".sync-lock"
        }
        defer { free(resolved) }
        return String(cString: resolved) + ".sync-lock"
    }

    /// Takes the lock for one session of `store`. Throws `replication-locked`
    /// when another process, or another store of this process, holds it,
    /// `replication-lock-unavailable` (or `storage-full`) when its file cannot
    /// be opened or locked at all (too many open files, no permission, a
    /// directory in its place), and `closed` when the store is closed.
    static func acquire(for store: SyncStore) throws(SyncError) {
        try store.checkOpen()
        let owner = ObjectIdentifier(store)
        let failure: SyncError? = held.withLock { held in
            if let hold = held.first(where: { $0.value.store == owner }) {
                held[hold.key]?.sessions += 1
                return nil
            }
            guard let file = FileID(path: store.path) else {
                let code = errno
                return unavailable("look up the store file \(store.path)", errno: code)
            }
            guard held[file] == nil else { return SyncPeer.lockedError(store.path, byThisProcess: true) }
            let path = lockPath(for: store.path)
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return unavailable("open the replication lock file \(path)", errno: errno) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                close(fd)
                return code == EWOULDBLOCK ? SyncPeer.lockedError(store.path) : unavailable("lock the replication lock file \(path)", errno: code)
            }
            held[file] = Held(store: owner, descriptor: fd, sessions: 1)
            return nil
        }
        if let failure { throw failure }
    }

    /// The lock could not be taken for a reason of its own (not: another holds
    /// it): its file could not be opened or locked, or the store's looked up.
    private static func unavailable(_ operation: String, errno code: Int32) -> SyncError {
        let reason = String(cString: strerror(code))
        let full = code == ENOSPC || code == EDQUOT
        return SyncError(full ? .storageFull : .replicationLockUnavailable,
                         "cannot \(operation) (\(reason), errno \(code)); the store stays local and retries")
    }

    /// Ends one session's hold of `store`; the last one releases the lock.
    static func release(for store: SyncStore) {
        let owner = ObjectIdentifier(store)
        held.withLock { held in
            guard let hold = held.first(where: { $0.value.store == owner }) else { return }
            if hold.value.sessions > 1 {
                held[hold.key]?.sessions -= 1
            } else {
                flock(hold.value.descriptor, LOCK_UN)
                close(hold.value.descriptor)
                held[hold.key] = nil
            }
        }
    }

    /// Whether a store of this process holds the lock of the file at `storePath`
    /// (tests check that nothing stays held).
    static func isHeld(storePath: String) -> Bool {
        guard let file = FileID(path: storePath) else { return false }
        return held.withLock { $0[file] != nil }
    }
}

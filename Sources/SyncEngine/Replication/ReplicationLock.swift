import Foundation
import Synchronization

/// At most one process replicates a store file at a time (an app and its
/// extension may both open it), so the peer never sees two sessions for one
/// device. The lock is an advisory `flock` on `<store>.sync-lock`, released
/// when the last session in this process ends or the process dies.
/// Sessions within one process share it.
enum ReplicationLock {
    private struct Held {
        var descriptor: Int32
        var sessions: Int
    }

    private static let held = Mutex<[String: Held]>([:])

    static func lockPath(for storePath: String) -> String {
        URL(fileURLWithPath: storePath).standardizedFileURL.path + ".sync-lock"
    }

    /// Takes the lock for one session. Throws `replication-locked` when
    /// another process holds it, and `replication-lock-unavailable` (or
    /// `storage-full`) when its file cannot be opened or locked at all: too
    /// many open files, no permission, a directory in its place.
    static func acquire(storePath: String) throws(SyncError) {
        let path = lockPath(for: storePath)
        let failure: SyncError? = held.withLock { held in
            if var existing = held[path] {
                existing.sessions += 1
                held[path] = existing
                return nil
            }
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return unavailable(path, "open", errno: errno) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                close(fd)
                return code == EWOULDBLOCK ? SyncPeer.lockedError(storePath) : unavailable(path, "lock", errno: code)
            }
            held[path] = Held(descriptor: fd, sessions: 1)
            return nil
        }
        if let failure { throw failure }
    }

    /// The lock file could not be opened or locked (not: another process holds it).
    private static func unavailable(_ path: String, _ operation: String, errno code: Int32) -> SyncError {
        let reason = String(cString: strerror(code))
        let full = code == ENOSPC || code == EDQUOT
        return SyncError(full ? .storageFull : .replicationLockUnavailable,
                         "cannot \(operation) the replication lock file \(path) (\(reason), errno \(code)); the store stays local and retries")
    }

    /// Ends one session's hold; the last one releases the lock.
    static func release(storePath: String) {
        let path = lockPath(for: storePath)
        held.withLock { held in
            guard var existing = held[path] else { return }
            existing.sessions -= 1
            if existing.sessions > 0 {
                held[path] = existing
            } else {
                flock(existing.descriptor, LOCK_UN)
                close(existing.descriptor)
                held[path] = nil
            }
        }
    }
}

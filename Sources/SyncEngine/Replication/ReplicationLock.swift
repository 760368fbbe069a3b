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

    /// Takes the lock for one session; false when another process holds it.
    static func acquire(storePath: String) -> Bool {
        let path = lockPath(for: storePath)
        return held.withLock { held in
            if var existing = held[path] {
                existing.sessions += 1
                held[path] = existing
                return true
            }
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return false }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                close(fd)
                return false
            }
            held[path] = Held(descriptor: fd, sessions: 1)
            return true
        }
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

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// Whether a store's file is open elsewhere: in another `SyncStore` of this
/// process, or in another process (an app and its extension). A store looks
/// for other writers' commits at its full poll rate only while it is not
/// alone (`SyncStore+SharedFile`).
///
/// Each process with the store open holds a shared `fcntl` lock on
/// `<store>.sync-open` (one descriptor per file and process: closing any
/// other descriptor of it would drop the process's locks). Asking for a
/// conflicting lock (`F_GETLK`, which passes over the caller's own locks)
/// finds the other processes; a count finds the other stores of this one.
final class StorePresence: Sendable {
    private struct FileID: Hashable {
        var device: UInt64
        var inode: UInt64

        init(_ status: stat) {
            device = UInt64(truncatingIfNeeded: status.st_dev)
            inode = UInt64(truncatingIfNeeded: status.st_ino)
        }
    }

    private struct Held {
        var descriptor: Int32
        var stores: Int
    }

    private static let held = Mutex<[FileID: Held]>([:])

    /// nil when the marker file could not be made or locked: others are then taken to be present.
    private let id: FileID?
    private let left = Atomic<Bool>(false)

    static func markerPath(for storePath: String) -> String {
        URL(fileURLWithPath: storePath).standardizedFileURL.path + ".sync-open"
    }

    /// Marks the store at `storePath` open in this process.
    init(storePath: String) {
        let path = StorePresence.markerPath(for: storePath)
        id = StorePresence.held.withLock { held -> FileID? in
            var status = stat()
            if stat(path, &status) == 0, var existing = held[FileID(status)] {
                existing.stores += 1
                held[FileID(status)] = existing
                return FileID(status)
            }
            let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { return nil }
            var lock = StorePresence.lock(Int16(F_RDLCK))
            guard fstat(descriptor, &status) == 0, fcntl(descriptor, F_SETLK, &lock) == 0 else {
                close(descriptor)
                return nil
            }
            let id = FileID(status)
            held[id] = Held(descriptor: descriptor, stores: 1)
            return id
        }
    }

    deinit { leave() }

    /// Whether another store has the file open, here or in another process (true when unknown).
    var othersPresent: Bool {
        guard let id, !left.load(ordering: .acquiring) else { return true }
        return StorePresence.held.withLock { held in
            guard let entry = held[id] else { return true }
            if entry.stores > 1 { return true }
            var probe = StorePresence.lock(Int16(F_WRLCK))
            guard fcntl(entry.descriptor, F_GETLK, &probe) == 0 else { return true }
            return probe.l_type != Int16(F_UNLCK)
        }
    }

    /// Marks the store closed (once); the last store of the file in this process releases the lock.
    func leave() {
        guard let id, !left.exchange(true, ordering: .acquiringAndReleasing) else { return }
        StorePresence.held.withLock { held in
            guard var entry = held[id] else { return }
            entry.stores -= 1
            if entry.stores > 0 {
                held[id] = entry
            } else {
                close(entry.descriptor)
                held[id] = nil
            }
        }
    }

    /// A lock of `type` over the whole file.
    private static func lock(_ type: Int16) -> flock {
        var lock = flock()
        lock.l_type = type
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 0
        return lock
    }
}

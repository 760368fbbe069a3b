import Synchronization
@_spi(Testing) import SyncEngine

/// The crash VFSes of this process, reused between runs: SQLite keeps a VFS
/// registered for good, and a power cut fails every file of its VFS, so each
/// node that may lose power (or fill its disk) gets one of its own for the length of a run.
enum CrashVFSPool {
    private struct Pool {
        var free: [CrashVFS] = []
        var registered = 0
    }

    private static let pool = Mutex(Pool())

    /// A VFS no other run uses, powered and disarmed.
    static func acquire() throws -> CrashVFS {
        let reused: CrashVFS? = pool.withLock { $0.free.popLast() }
        let vfs: CrashVFS
        if let reused {
            vfs = reused
        } else {
            let number = pool.withLock { p in
                p.registered += 1
                return p.registered
            }
            vfs = try CrashVFS.register(name: "syncsim-crash-\(number)")
        }
        vfs.disarm()
        vfs.powerOn()
        vfs.setDiskFull(false)
        return vfs
    }

    /// Gives `vfs` back once no store of the run has files open on it.
    static func release(_ vfs: CrashVFS) {
        vfs.disarm()
        vfs.powerOn()
        vfs.setDiskFull(false)
        pool.withLock { $0.free.append(vfs) }
    }
}

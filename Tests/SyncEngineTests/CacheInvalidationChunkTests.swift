import Foundation
@testable import SyncEngine
import Synchronization
import Testing

/// A batch's keys leave the cache a chunk at a time (`StoreCache.invalidate`),
/// so that cache hits are not held back while a batch from the peer is dropped.
@Suite struct CacheInvalidationChunkTests {
    static func slot(_ byte: UInt8) -> StoreCache.Slot {
        StoreCache.Slot(bytes: [byte], encoding: "json", version: HLCTimestamp(packed: Int64(byte) << 16, node: 1), decoded: nil)
    }

    /// Between two chunks the lock is free: a read of the cache (here, on
    /// the invalidating thread itself, which would wait forever for a lock
    /// it held) finds the keys of later chunks still there, and each chunk
    /// moves the epoch.
    @Test func readsComeInBetweenTheChunksOfABatchsInvalidation() {
        let cache = StoreCache()
        let keys = (0..<1_000).map { "k\($0)" }
        for key in keys { cache.store(key, Self.slot(7)) }
        cache.store("hot", Self.slot(9))
        let epochs = Mutex<[UInt64]>([])
        let lastKeyStillCached = Mutex<[Bool]>([])
        cache.betweenInvalidationChunks.withLock { hook in
            hook = { @Sendable in
                epochs.withLock { $0.append(cache.epoch) }
                lastKeyStillCached.withLock { $0.append(cache.lookup("k999") != nil) }
                _ = cache.lookup("hot")
            }
        }
        cache.invalidate(keys)
        // 1,000 keys: seven full chunks of 128, then 104.
        #expect(epochs.withLock { $0.count } == 1_000 / StoreCache.invalidationChunk)
        let seen = epochs.withLock { $0 }
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 }, "the epoch did not move with each chunk: \(seen)")
        #expect(lastKeyStillCached.withLock { $0 }.allSatisfy { $0 })
        // Every key is gone at the end, and only those.
        #expect(keys.allSatisfy { cache.peek($0) == nil })
        #expect(cache.peek("hot")?.bytes == [9])
    }

    /// A read that began before the commit cannot put its older row back,
    /// whichever chunk its key is in.
    @Test func aFillThatBeganBeforeTheInvalidationIsNotKept() {
        let cache = StoreCache()
        let keys = (0..<300).map { "k\($0)" }
        for key in keys { cache.store(key, Self.slot(1)) }
        let epoch = cache.epoch
        cache.invalidate(keys)
        cache.fill("k0", Self.slot(1), readSince: epoch)
        cache.fill("k299", Self.slot(1), readSince: epoch)
        #expect(cache.peek("k0") == nil)
        #expect(cache.peek("k299") == nil)
    }
}

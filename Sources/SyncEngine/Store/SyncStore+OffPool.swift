import Dispatch
import Synchronization

extension SyncStore {
    /// Runs `work` on the store's own serial queue, suspending the caller: a
    /// commit (an `fsync` under `.full`, seconds on a busy disk) or a wait for
    /// the write lock never holds a thread of Swift concurrency's cooperative
    /// pool, which every other task of the app needs. The `async` API's
    /// commits, and reads the cache cannot answer, run there in the order
    /// they were called; `work` runs to its end even when the caller's task
    /// is cancelled.
    public func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            blockingWork.async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// The value of `key` when the cache holds it decoded (one lookup under
    /// one lock, a comparison with the declaration the value was checked
    /// with and a cast, counting a hit), else nil; nil once closed, and when
    /// the registry refuses `key`'s declaration (the read then throws as a
    /// miss does). `value(for:)` and `get` answer from it first.
    @inlinable
    public func cachedValue<Value>(for key: Key<Value>) -> Value? {
        if closed.load(ordering: .relaxed) { return nil }
        if let value = cache.typedValue(key.name, as: Value.self, declarationToken: key.declarationToken) { return value }
        if let (decoded, version, bytes) = cachedDecodedValue(forKey: key.name, declaredAs: key.descriptor, token: key.declarationToken),
           let value = decoded as? Value {
            rememberTyped(CachedValue(value, declarationToken: key.declarationToken), forKey: key.name, version: version, bytes: bytes)
            return value
        }
        return nil
    }
}

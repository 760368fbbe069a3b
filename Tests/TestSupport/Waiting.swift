import Dispatch
import Synchronization
import Testing

// Shared by the test targets (SyncEngineTests, SyncTransportTests).
// Every wait for an event has its own deadline: a regression fails the test
// with what it was waiting for, instead of hanging the run until a suite's
// time limit (minutes) or forever.

/// How long one wait may take by default: generous for a loaded two-core CI
/// machine, far below any suite's time limit.
public let waitLimit: Duration = .seconds(60)

/// A wait that did not end in time (or whose events stopped first).
public struct WaitFailed: Error, CustomStringConvertible {
    public let description: String

    public init(description: String) { self.description = description }

    public static func timedOut(_ what: String, after limit: Duration, at location: SourceLocation) -> WaitFailed {
        WaitFailed(description: "timed out after \(limit) waiting for \(what) (\(location.fileID):\(location.line))")
    }

    public static func ended(_ what: String, at location: SourceLocation) -> WaitFailed {
        WaitFailed(description: "the events ended while waiting for \(what) (\(location.fileID):\(location.line))")
    }
}

/// Resumes a continuation once: with the operation's result or the deadline's error, whichever comes first.
private final class FirstResult<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation.withLock { $0 = continuation }
    }

    /// True when this call resumed the waiter.
    @discardableResult
    func resume(with result: Result<T, any Error>) -> Bool {
        guard let waiter = continuation.withLock({ current -> CheckedContinuation<T, any Error>? in
            defer { current = nil }
            return current
        }) else { return false }
        waiter.resume(with: result)
        return true
    }
}

/// Runs `operation` and throws `WaitFailed` naming `what` if it has not
/// finished within `limit`. The operation runs in its own task and is
/// cancelled at the deadline; the caller does not wait for it to notice, so a
/// wait that ignores cancellation fails the test too instead of hanging it.
public func withDeadline<T: Sendable>(
    _ what: String, within limit: Duration = waitLimit, sourceLocation: SourceLocation = #_sourceLocation,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let work = Task { try await operation() }
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let first = FirstResult(continuation)
            // The deadline is a timer on a dispatch queue: it fires once, nothing waits on it.
            let timer = DispatchWorkItem {
                if first.resume(with: .failure(WaitFailed.timedOut(what, after: limit, at: sourceLocation))) { work.cancel() }
            }
            let (seconds, attoseconds) = limit.components
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)),
                                              execute: timer)
            Task {
                let result = await work.result
                first.resume(with: result)
                timer.cancel()
            }
        }
    } onCancel: {
        work.cancel()
    }
}

/// The first element of `stream` that satisfies `match`, within `limit`.
/// Throws `WaitFailed` naming `what` at the deadline or when the stream ends first.
/// Successive calls on one stream continue where the previous one stopped.
@discardableResult
public func first<T: Sendable>(
    of stream: AsyncStream<T>, _ what: String, within limit: Duration = waitLimit,
    sourceLocation: SourceLocation = #_sourceLocation,
    where match: @escaping @Sendable (T) throws -> Bool = { _ in true }
) async throws -> T {
    try await withDeadline(what, within: limit, sourceLocation: sourceLocation) {
        for await element in stream where try match(element) { return element }
        throw WaitFailed.ended(what, at: sourceLocation)
    }
}

/// Every element of `stream` until it ends, which must happen within `limit`.
public func all<T: Sendable>(
    of stream: AsyncStream<T>, _ what: String, within limit: Duration = waitLimit,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws -> [T] {
    try await withDeadline(what, within: limit, sourceLocation: sourceLocation) {
        var elements: [T] = []
        for await element in stream { elements.append(element) }
        return elements
    }
}

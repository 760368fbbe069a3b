import Foundation
import Synchronization
import SyncEngine
import Testing
@_exported import TestSupport

// Every wait for an event has its own deadline: a regression fails the test
// with what it was waiting for, instead of hanging the run until a suite's
// time limit (minutes) or forever.

/// Waits until `condition` holds, re-checking on every change of `store`;
/// throws `WaitFailed` naming `what` if it does not hold within `limit`.
func eventually(
    _ store: any KeyValueBackend, _ what: String = "a condition on the store", within limit: Duration = waitLimit,
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: @escaping @Sendable () throws -> Bool
) async throws {
    let changes = store.changes()  // subscribed before the first check: no change can slip between
    if try condition() { return }
    try await first(of: changes, what, within: limit, sourceLocation: sourceLocation) { _ in try condition() }
}

/// Blocks until `process` has exited (at once when it is not running).
/// Not Foundation's `waitUntilExit`: that spins a run loop, whose descriptors
/// it cannot make in a process that has none left (EMFILE), and traps.
/// With `limit`, gives up after it and returns false (a process out of
/// descriptors may never hear of its child's end: a teardown must not hang).
@discardableResult
func waitForExit(_ process: Process, within limit: Duration? = nil) -> Bool {
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    guard process.isRunning else { return true }
    guard let limit else {
        exited.wait()
        return true
    }
    let nanoseconds = limit.components.seconds * 1_000_000_000 + limit.components.attoseconds / 1_000_000_000
    return exited.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .success || !process.isRunning
}

/// The exit status of `process`, which must end within `limit`; at the
/// deadline the process is killed and `WaitFailed` thrown. Never blocks a
/// thread of the concurrency pool (the wait runs on a thread of its own).
@discardableResult
func exitStatus(
    of process: Process, _ what: String, within limit: Duration = waitLimit, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> Int32 {
    do {
        return try await withDeadline(what, within: limit, sourceLocation: sourceLocation) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread {
                    waitForExit(process)
                    continuation.resume()
                }
            }
            return process.terminationStatus
        }
    } catch {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        throw error
    }
}

/// Everything `pipe` delivers until its writer closes it, within `limit`.
func output(
    of pipe: Pipe, _ what: String, within limit: Duration = waitLimit, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> Data {
    let handle = pipe.fileHandleForReading
    return try await withDeadline(what, within: limit, sourceLocation: sourceLocation) {
        await withCheckedContinuation { (continuation: CheckedContinuation<Data, Never>) in
            Thread.detachNewThread { continuation.resume(returning: handle.readDataToEndOfFile()) }
        }
    }
}

extension Result where Failure == any Error {
    /// The outcome of an async body, so clean-up runs before its error is rethrown.
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

import Foundation
import Synchronization
import Testing

/// The wait helpers fail when what they wait for does not come: the tests that
/// use them can fail instead of hanging.
@Suite(.timeLimit(.minutes(5))) struct WaitingTests {
    @Test func aWaitThatIgnoresCancellationStillFailsAtItsDeadline() async throws {
        let finished = Atomic<Bool>(false)
        let error = await #expect(throws: WaitFailed.self) {
            try await withDeadline("an operation that ignores cancellation", within: .milliseconds(100)) {
                // Not cancellable: resumes after 10 s whatever happens.
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 10) { continuation.resume() }
                }
                finished.store(true, ordering: .sequentiallyConsistent)
            }
        }
        #expect(error?.description.hasPrefix("timed out after 0.1 seconds waiting for an operation that ignores cancellation") == true,
                "\(String(describing: error))")
        let operationFinished = finished.load(ordering: .sequentiallyConsistent)
        #expect(!operationFinished, "the caller did not wait for the operation to notice")
    }

    @Test func aWaitReturnsTheOperationsResultAndRethrowsItsError() async throws {
        #expect(try await withDeadline("a value") { 42 } == 42)
        struct Boom: Error {}
        await #expect(throws: Boom.self) { try await withDeadline("an error") { throw Boom() } }
    }

    @Test func firstOfAStreamMatchesTimesOutOrSeesTheEnd() async throws {
        let (stream, sink) = AsyncStream.makeStream(of: Int.self)
        for n in 1...5 { sink.yield(n) }
        #expect(try await first(of: stream, "an even number") { $0 % 2 == 0 } == 2)
        #expect(try await first(of: stream, "the next number") == 3, "a second wait continues where the first stopped")
        let timedOut = await #expect(throws: WaitFailed.self) {
            try await first(of: stream, "a number over 10", within: .milliseconds(100)) { $0 > 10 }
        }
        #expect(timedOut?.description.contains("timed out") == true)
        let (ending, end) = AsyncStream.makeStream(of: Int.self)
        end.yield(1)
        end.finish()
        let ended = await #expect(throws: WaitFailed.self) { try await first(of: ending, "a 2") { $0 == 2 } }
        #expect(ended?.description.hasPrefix("the events ended while waiting for a 2") == true)
    }

    @Test func aChildThatDoesNotExitIsKilledAtTheDeadline() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["600"]  // far longer than any starvation: only the kill can end it
        try process.run()
        await #expect(throws: WaitFailed.self) { try await exitStatus(of: process, "sleep 30 to exit", within: .milliseconds(200)) }
        try await exitStatus(of: process, "the killed child to be reaped")
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL)
    }
}

/// Apart from `WaitingTests` and its one-minute limit: spawning children is
/// slow while the rest of the suite runs on two cores.
@Suite(.timeLimit(.minutes(5))) struct PipeLinesTests {
    /// The end of a child's output is always seen, even when the child writes
    /// and exits at once, over and over (readability handlers missed it now and
    /// then on Linux, and the example-apps test hung in CI).
    @Test func theLinesOfAPipeAlwaysEndWhenItsWriterExits() async throws {
        for round in 0..<8 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "printf 'first\\nlast'"]
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let seen = try await all(of: lines(of: out), "round \(round)'s output to end")
            #expect(seen == ["first", "last"], "round \(round)")
            #expect(try await exitStatus(of: process, "round \(round)'s child to exit") == 0)
        }
    }
}

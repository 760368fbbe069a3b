import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// A queued round runs the store's change observers before it returns; one
/// that calls the synchronous `deliverQueued(through:)` of the same peer is
/// inside that round.
@Suite(.timeLimit(.minutes(3))) struct QueuedRoundReentrancyTests {
    /// An observer that ran a round by hand when a change arrived ("acknowledge
    /// at once") trapped with "Recursive call to lock Mutex": the round that
    /// applied the change held the peer's queued drivers while observers ran.
    /// The nested call is refused with `invalid-configuration`; the round
    /// itself applies and acknowledges.
    @Test func anObserverThatDeliversQueuedDuringARoundIsRefusedAndTheRoundAcknowledges() async {
        await #expect(processExitsWith: .success) {
            let pair = try Pair()
            let folder = TempFolder()
            let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
            try await pair.phone.set(9, for: TestKeys.steps)
            try phone.deliverQueued(through: phoneBox)
            let nested = Mutex<[Result<QueuedDeliveryReport, any Error>]>([])
            let observation = pair.watch.observeChanges(matching: .key(TestKeys.steps.name)) { change in
                guard change.origin == .remote else { return }
                let result = Result { try watch.deliverQueued(through: watchBox) }
                nested.withLock { $0.append(result) }
            }
            let report = try watch.deliverQueued(through: watchBox)
            observation.cancel()
            let results = nested.withLock { $0 }
            guard results.count == 1, case .failure(let error as SyncError) = results[0], error.code == .invalidConfiguration,
                  error.message.contains("inside a queued round") else { throw WaitFailed(description: "the nested call: \(results)") }
            guard report.entriesApplied == 1, report.messagesPosted > 0, try pair.watch.value(for: TestKeys.steps) == 9 else {
                throw WaitFailed(description: "the round: \(report)")
            }
            // The phone reads the acknowledgement: nothing is pending for the watch.
            try phone.deliverQueued(through: phoneBox)
            guard try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0 else { throw WaitFailed(description: "still pending") }
            withExtendedLifetime(folder) {}
        }
    }

    /// Another thread's round started from inside a round is not refused: it
    /// waits for the round to end, then runs (and finds nothing new).
    @Test func aRoundOnAnotherThreadStartedFromInsideARoundWaitsAndRuns() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        try await pair.phone.set(9, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        let (results, result) = AsyncStream.makeStream(of: Result<QueuedDeliveryReport, any Error>.self)
        let observation = pair.watch.observeChanges(matching: .key(TestKeys.steps.name)) { change in
            guard change.origin == .remote else { return }
            Thread.detachNewThread { result.yield(Result { try watch.deliverQueued(through: watchBox) }) }
        }
        defer { observation.cancel() }
        #expect(try watch.deliverQueued(through: watchBox).entriesApplied == 1)
        let other = try await first(of: results, "the other thread's round")
        #expect(try other.get().entriesApplied == 0)
        withExtendedLifetime(folder) {}
    }
}

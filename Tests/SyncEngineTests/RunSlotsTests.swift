import Foundation
@testable import SyncSim
import Synchronization
import Testing

/// Simulation runs in one process share a bound (`RunSlots`): a suite that
/// starts every fixture at once held 130 runs' stores and sockets open
/// together, 2,600 descriptors, and failed with EMFILE under `ulimit -n 1024`.
@Suite(.timeLimit(.minutes(5))) struct RunSlotsTests {
    /// How many runs are inside their slot now, and the most there were at once.
    final class Occupancy: Sendable {
        private let counts = Mutex((inside: 0, most: 0))
        func enter() { counts.withLock { $0.inside += 1; $0.most = max($0.most, $0.inside) } }
        func leave() { counts.withLock { $0.inside -= 1 } }
        var inside: Int { counts.withLock { $0.inside } }
        var most: Int { counts.withLock { $0.most } }
    }

    @Test func aRunBeyondTheWidthWaitsForASlotAndTakesTheFirstFreed() async throws {
        let slots = RunSlots(width: 2)
        let occupancy = Occupancy()
        let (entered, enteredInput) = AsyncStream.makeStream(of: Int.self)
        let gates = (0..<3).map { _ in AsyncStream.makeStream(of: Void.self) }
        let runs = gates.enumerated().map { index, gate in
            Task { @Sendable in
                await slots.withSlot {
                    occupancy.enter()
                    enteredInput.yield(index)
                    for await _ in gate.stream { break }
                    occupancy.leave()
                }
            }
        }
        var iterator = entered.makeAsyncIterator()
        let first = try #require(await iterator.next())
        let second = try #require(await iterator.next())
        let third = try #require(Set(0..<3).subtracting([first, second]).first)
        try await withDeadline("the third run to wait for a slot") {
            while slots.waitingCount == 0 { await Task.yield() }
        }
        #expect(occupancy.inside == 2)
        gates[first].continuation.finish()
        #expect(await iterator.next() == third, "the freed slot goes to the run that waited")
        gates[second].continuation.finish()
        gates[third].continuation.finish()
        for run in runs { await run.value }
        #expect(occupancy.most == 2)
        #expect(slots.waitingCount == 0)
    }

    @Test func theLimitIsBetweenFourAndSixteen() {
        #expect((4...16).contains(Simulation.concurrentRunLimit))
        #expect(RunSlots.simulated.width == Simulation.concurrentRunLimit && RunSlots.overTCP.width == Simulation.concurrentRunLimit)
    }
}

import Testing
@testable import SyncTransport

@Suite(.timeLimit(.minutes(10))) struct AsyncBoundedQueueTests {
    /// Stands in for a frame: we watch whether the queue still holds it.
    final class Payload: Sendable {
        let number: Int
        init(_ number: Int) { self.number = number }
    }

    /// A producer that must wait and a consumer that empties the queue meanwhile
    /// never wait for each other: the producer looks again under the lock before
    /// it queues itself. (It used to queue itself behind a consumer already waiting
    /// on an empty queue: a lost wakeup that stalled a slow TCP reader for good.)
    @Test func aWaitingProducerAndAnEmptyingConsumerNeverDeadlock() async throws {
        let count = 20_000
        for _ in 0..<5 {
            let queue = AsyncBoundedQueue<Payload>(capacity: 1)
            let producer = Task {
                for number in 0..<count { try await queue.push(Payload(number), cost: 1) }
                queue.finish()
            }
            // 40,000 hand-offs: about a second alone, minutes beside a loaded suite; a lost wakeup never ends.
            let received = try await withDeadline("the consumer to drain \(count) elements (a lost wakeup stalls it)", within: .seconds(240)) {
                var received = 0
                while let payload = try await queue.pop() {
                    #expect(payload.number == received)
                    received += 1
                }
                return received
            }
            try await withDeadline("the producer to finish") { try await producer.value }
            #expect(received == count)
        }
    }

    /// Finishing while taking the queued elements hands them to the caller, not
    /// to the consumer: it gets the end, and later pushes throw `.closed`.
    @Test func finishingTakesTheQueuedElementsOut() async throws {
        let queue = AsyncBoundedQueue<Int>(capacity: 10)
        try await queue.push(1, cost: 1)
        try await queue.push(2, cost: 1)
        #expect(queue.finishTakingQueued() == [1, 2])
        #expect(try await queue.pop() == nil)
        await #expect(throws: TransportError.self) { try await queue.push(3, cost: 1) }
        #expect(queue.finishTakingQueued() == [])
        #expect(throws: TransportError.self) { try queue.pushIfWithin(10, 4, cost: 1) }
    }

    /// Taking what is queued never waits: the queued elements in order, then
    /// nil (the end and a failure are left for `pop`); each take makes room for
    /// a producer that waits.
    @Test func takingTheQueuedElementsNeverWaits() async throws {
        let queue = AsyncBoundedQueue<Int>(capacity: 2)
        #expect(queue.popQueued() == nil)
        try await queue.push(1, cost: 1)
        try await queue.push(2, cost: 1)
        let blocked = Task { try await queue.push(3, cost: 1) }
        #expect(queue.popQueued() == 1)
        try await withDeadline("the waiting producer to be admitted") { try await blocked.value }
        #expect(queue.popQueued() == 2)
        #expect(queue.popQueued() == 3)
        #expect(queue.popQueued() == nil)
        queue.finish(throwing: TransportError(.closed, "gone"))
        #expect(queue.popQueued() == nil)
        await #expect(throws: TransportError.self) { try await queue.pop() }
    }

    /// A push within a limit never waits: it queues, hands the element to a
    /// waiting consumer, or declines.
    @Test func aPushWithinALimitQueuesOrDeclines() async throws {
        let queue = AsyncBoundedQueue<Int>(capacity: .max)
        #expect(try queue.pushIfWithin(2, 1, cost: 1))
        #expect(try queue.pushIfWithin(2, 2, cost: 1))
        #expect(try !queue.pushIfWithin(2, 3, cost: 1))
        #expect(try await queue.pop() == 1)
        #expect(try queue.pushIfWithin(2, 3, cost: 1))
        #expect(try await queue.pop() == 2)
        #expect(try await queue.pop() == 3)
        #expect(try !queue.pushIfWithin(0, 4, cost: 1))  // nothing may queue, and no consumer waits
        let consumer = Task { try await queue.pop() }
        try await withDeadline("the element to go straight to the waiting consumer") {
            while try !queue.pushIfWithin(0, 4, cost: 1) { await Task.yield() }
        }
        #expect(try await consumer.value == 4)
        #expect(queue.usedCost == 0)
    }

    /// Removing the bound admits the waiting producer (nobody pops) and every
    /// later push; the consumer still gets them all, in order, then the end.
    @Test func removingTheBoundAdmitsTheWaitingProducers() async throws {
        let (suspensions, suspended) = AsyncStream.makeStream(of: Void.self)
        let queue = AsyncBoundedQueue<Int>(capacity: 2, onSuspend: { suspended.yield() })
        try await queue.push(1, cost: 1)
        try await queue.push(2, cost: 1)
        let blocked = Task { try await queue.push(3, cost: 1) }
        try await first(of: suspensions, "the producer to wait for room")
        queue.removeBound()
        try await withDeadline("the waiting producer to be admitted") { try await blocked.value }
        try await queue.push(4, cost: 10)
        #expect(queue.isFull == false)
        queue.finish()
        var popped: [Int] = []
        while let element = try await queue.pop() { popped.append(element) }
        #expect(popped == [1, 2, 3, 4])
    }

    @Test func elementsComeOutInOrderWithinTheCostBound() async throws {
        let queue = AsyncBoundedQueue<Payload>(capacity: 10)
        try await queue.push(Payload(1), cost: 4)
        try await queue.push(Payload(2), cost: 4)
        #expect(queue.usedCost == 8)
        #expect(queue.isFull == false)
        try await queue.push(Payload(3), cost: 2)
        #expect(queue.isFull)
        #expect(try await queue.pop()?.number == 1)
        #expect(try await queue.pop()?.number == 2)
        #expect(try await queue.pop()?.number == 3)
        #expect(queue.usedCost == 0)
    }

    /// A popped element is released at once. (The queue used to keep up to 64
    /// popped frames referenced until it compacted: tens of MB of retained
    /// frames while syncing 100 KB values.)
    @Test func poppedElementsAreNotRetained() async throws {
        let queue = AsyncBoundedQueue<Payload>(capacity: 1 << 20)
        weak var first: Payload?
        weak var middle: Payload?
        do {
            let a = Payload(0), b = Payload(1)
            first = a
            middle = b
            try await queue.push(a, cost: 1)
            try await queue.push(b, cost: 1)
            for i in 2..<10 { try await queue.push(Payload(i), cost: 1) }
        }
        #expect(first != nil)
        _ = try await queue.pop()
        #expect(first == nil, "the queue still references a popped element")
        #expect(middle != nil)
        _ = try await queue.pop()
        #expect(middle == nil, "the queue still references a popped element")
        for i in 2..<10 { #expect(try await queue.pop()?.number == i) }
    }
}

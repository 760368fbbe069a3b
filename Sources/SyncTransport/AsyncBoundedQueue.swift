import Synchronization

/// A FIFO between producer tasks and consumer tasks, bounded by a total
/// cost (bytes): `push` suspends while the queue is full, `pop` while it is
/// empty. One element always fits into an empty queue, whatever its cost.
/// Consumers that wait together take the elements in the order they began to
/// wait (a listener's connections, taken by two `serve` calls).
final class AsyncBoundedQueue<Element: Sendable>: Sendable {
    private struct Waiter {
        var id: UInt64
        var element: Element
        var cost: Int
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        /// Slots before `head` are consumed and hold nil, so a popped element
        /// (a frame of up to megabytes) is freed at once, not at the next compaction.
        var items: [(element: Element?, cost: Int)] = []
        var head = 0
        var used = 0
        var finished = false
        /// Set by `removeBound()`: every push fits.
        var unbounded = false
        var failure: (any Error)?
        var consumers: [(id: UInt64, continuation: CheckedContinuation<Element?, any Error>)] = []
        var producers: [Waiter] = []
        var nextID: UInt64 = 0

        var count: Int { items.count - head }

        mutating func append(_ element: Element, cost: Int) {
            items.append((element, cost))
            used += cost
        }

        mutating func removeFirst() -> Element {
            let item = items[head]
            items[head].element = nil
            head += 1
            used -= item.cost
            if head == items.count {
                items.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 64, head * 2 > items.count {
                items.removeSubrange(0..<head)
                head = 0
            }
            return item.element!
        }

        func fits(_ cost: Int, capacity: Int) -> Bool {
            count == 0 || unbounded || used + cost <= capacity
        }

        /// Takes `element` when no producer waits before it and it fits: for the
        /// waiting consumer (to resume outside the lock) or into the queue.
        /// `nil`: the producer must wait.
        mutating func offer(_ element: Element, cost: Int, capacity: Int) -> Taken? {
            guard producers.isEmpty, fits(cost, capacity: capacity) else { return nil }
            if !consumers.isEmpty { return .byConsumer(consumers.removeFirst().continuation) }
            append(element, cost: cost)
            return .queued
        }
    }

    /// Where an offered element went.
    private enum Taken { case queued, byConsumer(CheckedContinuation<Element?, any Error>) }
    private enum PushStep { case done(Taken), closed, wait(UInt64) }
    private enum RegisterStep { case waiting, failed(any Error), done(Taken) }
    private enum PopStep { case element(Element, [Waiter]), end, failure(any Error), wait(UInt64) }

    private let state = Mutex(State())
    private let capacity: Int
    private let onSuspend: (@Sendable () -> Void)?
    private let onConsumerWait: (@Sendable (Int) -> Void)?

    /// - Parameters:
    ///   - capacity: the total cost above which `push` suspends.
    ///   - onSuspend: called (outside the lock) each time a `push` suspends.
    ///   - onConsumerWait: called (outside the lock) each time a `pop` begins to
    ///     wait, with how many wait now (for tests).
    init(capacity: Int, onSuspend: (@Sendable () -> Void)? = nil, onConsumerWait: (@Sendable (Int) -> Void)? = nil) {
        self.capacity = max(1, capacity)
        self.onSuspend = onSuspend
        self.onConsumerWait = onConsumerWait
    }

    /// The total cost of the queued elements.
    var usedCost: Int { state.withLock { $0.used } }

    /// Whether a push would suspend now (or producers already wait).
    var isFull: Bool { state.withLock { !$0.producers.isEmpty || (!$0.unbounded && $0.count > 0 && $0.used >= capacity) } }

    /// Appends `element`, suspending while the queue is full. Throws
    /// `TransportError(.closed)` once the queue is finished, and
    /// `CancellationError` if the task is cancelled while waiting.
    func push(_ element: Element, cost: Int) async throws {
        let immediate: PushStep = state.withLock { state in
            if state.finished { return .closed }
            if let taken = state.offer(element, cost: cost, capacity: capacity) { return .done(taken) }
            state.nextID += 1
            return .wait(state.nextID)
        }
        switch immediate {
        case .done(let taken):
            if case .byConsumer(let consumer) = taken { consumer.resume(returning: element) }
            return
        case .closed: throw TransportError(.closed, "the connection is closed")
        case .wait(let id):
            onSuspend?()
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    // Look again under the lock: the consumer may have emptied the queue (and begun
                    // waiting) since the first look; a producer queued now would wait for a pop that never comes.
                    let now: RegisterStep = state.withLock { state in
                        if state.finished { return .failed(TransportError(.closed, "the connection is closed")) }
                        if Task.isCancelled { return .failed(CancellationError()) }
                        if let taken = state.offer(element, cost: cost, capacity: capacity) { return .done(taken) }
                        state.producers.append(Waiter(id: id, element: element, cost: cost, continuation: continuation))
                        return .waiting
                    }
                    switch now {
                    case .waiting: break  // resumed by pop, finish or cancellation
                    case .failed(let error): continuation.resume(throwing: error)
                    case .done(let taken):
                        if case .byConsumer(let consumer) = taken { consumer.resume(returning: element) }
                        continuation.resume()
                    }
                }
            } onCancel: {
                let waiter: Waiter? = state.withLock { state in
                    guard let index = state.producers.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.producers.remove(at: index)
                }
                waiter?.continuation.resume(throwing: CancellationError())
            }
        }
    }

    /// Hands `element` to the waiting consumer, or appends it when the
    /// queued cost stays within `limit` (and the queue's capacity), without
    /// waiting; false, leaving the element to the caller, when neither.
    /// Throws `TransportError(.closed)` once the queue is finished.
    func pushIfWithin(_ limit: Int, _ element: Element, cost: Int) throws -> Bool {
        let taken: Taken? = try state.withLock { state in
            if state.finished { throw TransportError(.closed, "the connection is closed") }
            guard !state.consumers.isEmpty || state.used + cost <= limit else { return nil }
            return state.offer(element, cost: cost, capacity: capacity)
        }
        guard let taken else { return false }
        if case .byConsumer(let consumer) = taken { consumer.resume(returning: element) }
        return true
    }

    /// The next element; `nil` once the queue is finished and empty (or the
    /// task is cancelled). Throws the finishing error, after the queued elements.
    func pop() async throws -> Element? {
        let immediate: PopStep = state.withLock { state in
            if let ready = takeReady(&state) { return ready }
            state.nextID += 1
            return .wait(state.nextID)
        }
        switch immediate {
        case .element(let element, let admitted):
            for waiter in admitted { waiter.continuation.resume() }
            return element
        case .end: return nil
        case .failure(let error): throw error
        case .wait(let id):
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Element?, any Error>) in
                    let now: PopStep = state.withLock { state in
                        if let ready = takeReady(&state) { return ready }
                        if Task.isCancelled { return .end }
                        state.consumers.append((id, continuation))
                        return .wait(UInt64(state.consumers.count))
                    }
                    switch now {
                    case .wait(let waiting): onConsumerWait?(Int(waiting))  // resumed by push, finish or cancellation
                    case .element(let element, let admitted):
                        for waiter in admitted { waiter.continuation.resume() }
                        continuation.resume(returning: element)
                    case .end: continuation.resume(returning: nil)
                    case .failure(let error): continuation.resume(throwing: error)
                    }
                }
            } onCancel: {
                let consumer = state.withLock { state -> CheckedContinuation<Element?, any Error>? in
                    guard let index = state.consumers.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.consumers.remove(at: index).continuation
                }
                consumer?.resume(returning: nil)
            }
        }
    }

    /// The next queued element, without waiting; nil when none is queued (the
    /// end or a failure is left for `pop` to report).
    func popQueued() -> Element? {
        guard let (element, admitted) = state.withLock({ takeQueued(&$0) }) else { return nil }
        for waiter in admitted { waiter.continuation.resume() }
        return element
    }

    /// The next queued element and the producers its room admits; nil when none is queued.
    private func takeQueued(_ state: inout State) -> (Element, [Waiter])? {
        guard state.count > 0 else { return nil }
        let element = state.removeFirst()
        return (element, admitWaiters(&state))
    }

    /// What `pop` returns without waiting: the next element (and the
    /// producers it admits), the finishing error once, or the end; nil when
    /// it must wait.
    private func takeReady(_ state: inout State) -> PopStep? {
        if let (element, admitted) = takeQueued(&state) { return .element(element, admitted) }
        guard state.finished else { return nil }
        if let failure = state.failure {
            state.failure = nil
            return .failure(failure)
        }
        return .end
    }

    /// Ends the queue: waiting producers throw `.closed`; the consumer gets
    /// the queued elements, then `error` if given, else `nil`. Only the first
    /// call has an effect.
    func finish(throwing error: (any Error)? = nil) {
        _ = end(throwing: error, takingQueued: false)
    }

    /// Ends the queue as `finish()` does, but takes the queued elements out
    /// (returned, oldest first) instead of leaving them for the consumer,
    /// which gets `nil` at once.
    func finishTakingQueued() -> [Element] {
        end(throwing: nil, takingQueued: true)
    }

    /// `finish` and `finishTakingQueued`: one step under the lock, so that no
    /// push can slip in between taking the elements out and finishing.
    private func end(throwing error: (any Error)?, takingQueued: Bool) -> [Element] {
        let (queued, producers, consumers): ([Element], [Waiter], [CheckedContinuation<Element?, any Error>]) = state.withLock { state in
            var queued: [Element] = []
            if takingQueued { while state.count > 0 { queued.append(state.removeFirst()) } }
            guard !state.finished else { return (queued, [], []) }
            state.finished = true
            state.failure = error
            let producers = state.producers
            state.producers = []
            let consumers = state.count == 0 ? state.consumers.map(\.continuation) : []
            if !consumers.isEmpty {
                state.consumers = []
                state.failure = nil
            }
            return (queued, producers, consumers)
        }
        for producer in producers {
            producer.continuation.resume(throwing: TransportError(.closed, "the connection is closed"))
        }
        // The error, once, to the first consumer; the end to the others.
        for (index, consumer) in consumers.enumerated() {
            if index == 0, let error { consumer.resume(throwing: error) } else { consumer.resume(returning: nil) }
        }
        return queued
    }

    /// From now on `push` never waits: the waiting producers' elements are
    /// queued at once, in order, and later ones too. For when only a bounded
    /// rest can still come (a closed socket's last frames) and the consumer
    /// may have stopped: nothing is dropped, and no producer waits for ever.
    func removeBound() {
        let admitted = state.withLock { state -> [Waiter] in
            state.unbounded = true
            return admitWaiters(&state)
        }
        for waiter in admitted { waiter.continuation.resume() }
    }

    /// Moves waiting producers' elements into the queue while they fit.
    private func admitWaiters(_ state: inout State) -> [Waiter] {
        var admitted: [Waiter] = []
        while let first = state.producers.first, state.fits(first.cost, capacity: capacity) {
            state.producers.removeFirst()
            state.append(first.element, cost: first.cost)
            admitted.append(first)
        }
        return admitted
    }
}

/// A one-shot signal many tasks can wait for.
final class Latch: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Whether `open()` was called.
    var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Releases every waiter, now and later.
    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isOpen = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the latch is open, or when the task is cancelled.
    func wait() async {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.isOpen || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}

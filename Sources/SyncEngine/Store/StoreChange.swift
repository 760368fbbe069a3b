import Synchronization

/// One committed change of one key, as observers see it. Carries no value.
public struct StoreChange: Sendable, Equatable {
    public enum Kind: String, Sendable { case set, removed }
    /// Whether the change was made on this device or arrived from the peer.
    public enum Origin: String, Sendable { case local, remote }

    public let key: String
    public let kind: Kind
    public let origin: Origin
    public let version: HLCTimestamp
    /// True when another process sharing the store file made the change
    /// (e.g. an app extension); `origin` is then as that process saw it.
    public internal(set) var isFromAnotherProcess = false
    /// How many older changes the stream this came from dropped just before
    /// it: a `changes()` stream keeps the newest 10,000 its consumer has not
    /// read, and tells it here when it fell further behind. 0 otherwise.
    public internal(set) var missedBefore = 0
    /// The peer whose batch brought the change (its node id, as
    /// `peerEvents()` names peers), for a change a live session or a round of
    /// queued delivery applied; nil for a change made on this device, one
    /// another process made, and a removal a re-baseline made.
    public internal(set) var peer: UInt32?
}

extension StoreChange {
    /// `next`, telling that `missed` changes before it were dropped.
    static let marking: @Sendable (StoreChange, Int) -> [StoreChange] = { next, missed in
        var marked = next
        marked.missedBefore = missed
        return [marked]
    }
}

/// Which changes an observer wants.
public enum ChangeFilter: Sendable {
    case all
    case key(String)
    /// Keys whose full name starts with `namespace:`.
    case namespace(String)

    func matches(_ key: String) -> Bool {
        switch self {
        case .all: true
        case .key(let name): key == name
        case .namespace(let prefix): key.utf8.starts(with: (KeyName.canonical(prefix) + ":").utf8)  // bytes, as `members(of:)`
        }
    }
}

/// Fan-out of values to any number of subscribers: `AsyncStream`s, or
/// handlers called synchronously by `publish`. `finishAll` ends every
/// subscriber, and any that comes later at once (a closed store's streams end).
final class Broadcaster<Element: Sendable>: Sendable {
    private struct Subscriber {
        let accepts: @Sendable (Element) -> Bool
        let deliver: @Sendable (Element) -> Void
        let finish: @Sendable () -> Void
    }

    private struct State {
        var subscribers: [Int: Subscriber] = [:]
        var finished = false
    }

    private let state = Mutex(State())
    private let nextID = Atomic<Int>(0)

    /// A stream of the accepted elements that keeps the newest `limit` its
    /// consumer has not read. With `marking`, a consumer that fell further
    /// behind is told: the next element it reads goes through `marking` with
    /// the number dropped before it (which returns what the consumer reads instead).
    func subscribe(bufferingNewest limit: Int = 10_000, where accepts: @escaping @Sendable (Element) -> Bool = { _ in true },
                   marking: (@Sendable (_ next: Element, _ missed: Int) -> [Element])? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(limit))
        let dropped = DropCount()
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let added = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.subscribers[id] = Subscriber(accepts: accepts, deliver: { element in
                if case .dropped = continuation.yield(element) { dropped.count.add(1, ordering: .relaxed) }
            }, finish: { continuation.finish() })
            return true
        }
        if added {
            continuation.onTermination = { [weak self] _ in
                _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        } else {
            continuation.finish()
        }
        guard let marking else { return stream }
        let reader = MarkingReader(stream.makeAsyncIterator(), dropped: dropped, marking: marking)
        return AsyncStream(unfolding: { await reader.next() })
    }

    /// How many elements one subscriber's buffer dropped and it has not been told of.
    private final class DropCount: Sendable {
        let count = Atomic<Int>(0)
    }

    /// Reads a subscriber's buffered stream, putting `marking`'s elements
    /// before the first one read after a drop. One reader per stream, which
    /// `AsyncStream(unfolding:)` calls one `next()` at a time.
    private final class MarkingReader: @unchecked Sendable {  // reason: one reader per stream, called one next() at a time (above)
        private var iterator: AsyncStream<Element>.Iterator
        private var pending: [Element] = []
        private let dropped: DropCount
        private let marking: @Sendable (Element, Int) -> [Element]

        init(_ iterator: AsyncStream<Element>.Iterator, dropped: DropCount, marking: @escaping @Sendable (Element, Int) -> [Element]) {
            self.iterator = iterator
            self.dropped = dropped
            self.marking = marking
        }

        func next() async -> Element? {
            if !pending.isEmpty { return pending.removeFirst() }
            guard let element = await iterator.next() else { return nil }
            let missed = dropped.count.exchange(0, ordering: .relaxed)
            guard missed > 0 else { return element }
            pending = marking(element, missed)
            return pending.isEmpty ? element : pending.removeFirst()
        }
    }

    /// Calls `handler` on the publishing thread for each accepted element,
    /// until the returned observation is cancelled or released; `finished`
    /// once `finishAll` ends it (at once if it already has).
    func observe(where accepts: @escaping @Sendable (Element) -> Bool, finished: @escaping @Sendable () -> Void = {},
                 _ handler: @escaping @Sendable (Element) -> Void) -> ChangeObservation {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let added = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.subscribers[id] = Subscriber(accepts: accepts, deliver: handler, finish: finished)
            return true
        }
        if !added { finished() }
        return ChangeObservation { [weak self] in _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) } }
    }

    var hasSubscribers: Bool { state.withLock { !$0.subscribers.isEmpty } }

    func publish(_ element: Element) {
        let targets = state.withLock { $0.subscribers.values.filter { $0.accepts(element) }.map(\.deliver) }
        for deliver in targets { deliver(element) }
    }

    func finishAll() {
        let all = state.withLock { state -> [Subscriber] in
            defer {
                state.subscribers.removeAll()
                state.finished = true
            }
            return Array(state.subscribers.values)
        }
        for subscriber in all { subscriber.finish() }
    }
}

/// A handler registered with `KeyValueBackend.observeChanges(matching:_:)`:
/// it is called until `cancel()` or until this object is released.
public final class ChangeObservation: Sendable {
    private let onCancel: Mutex<(@Sendable () -> Void)?>

    init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = Mutex(onCancel)
    }

    /// Stops the handler; later commits no longer call it.
    public func cancel() {
        let action = onCancel.withLock { action -> (@Sendable () -> Void)? in
            defer { action = nil }
            return action
        }
        action?()
    }

    deinit { cancel() }
}

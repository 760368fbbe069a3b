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

    func subscribe(bufferingNewest limit: Int = 10_000, where accepts: @escaping @Sendable (Element) -> Bool = { _ in true }) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(limit))
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let added = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.subscribers[id] = Subscriber(accepts: accepts, deliver: { continuation.yield($0) }, finish: { continuation.finish() })
            return true
        }
        guard added else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
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

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
        case .namespace(let prefix): key.hasPrefix(prefix + ":")
        }
    }
}

/// Fan-out of values to any number of `AsyncStream` subscribers.
final class Broadcaster<Element: Sendable>: Sendable {
    private struct Subscriber {
        let accepts: @Sendable (Element) -> Bool
        let continuation: AsyncStream<Element>.Continuation
    }

    private let subscribers = Mutex<[Int: Subscriber]>([:])
    private let nextID = Atomic<Int>(0)

    func subscribe(bufferingNewest limit: Int = 10_000, where accepts: @escaping @Sendable (Element) -> Bool = { _ in true }) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(limit))
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        subscribers.withLock { $0[id] = Subscriber(accepts: accepts, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        return stream
    }

    var hasSubscribers: Bool { subscribers.withLock { !$0.isEmpty } }

    func publish(_ element: Element) {
        let targets = subscribers.withLock { $0.values.filter { $0.accepts(element) }.map(\.continuation) }
        for continuation in targets { continuation.yield(element) }
    }

    func finishAll() {
        let all = subscribers.withLock { s -> [Subscriber] in
            let values = Array(s.values)
            s.removeAll()
            return values
        }
        for subscriber in all { subscriber.continuation.finish() }
    }
}

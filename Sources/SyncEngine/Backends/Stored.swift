import Logging
import Observation
import Synchronization

/// A property bound to a typed key in a store: reads come synchronously from
/// the store's cache (the key's default when nothing is stored), writes go
/// through to the store. Works in plain classes and in `@Observable` models
/// (mark it `@ObservationIgnored`; reads are still tracked, because they go
/// through an observable `StoredValue`). Writes from the peer show up in the
/// property and notify observers.
///
/// ```swift
/// final class Settings {
///     @Stored(Keys.units, store: store) var units: String
/// }
/// settings.units = "metric"                 // written through
/// for await _ in settings.$units.changes { … }   // projected value: async API + change stream
/// ```
///
/// A write the store refuses (a read-only key on this device, an oversized
/// value) leaves the stored value unchanged and is reported to `onError`; by
/// default it is logged to `logger`, else to the store's own logger
/// (`StoreOptions.logger`, silent unless you give one). Use
/// `try await $property.set(_:)` to handle it yourself.
@propertyWrapper
public struct Stored<Value: Codable & Sendable>: Sendable {
    private let storage: StoredValue<Value>

    public init(_ key: Key<Value>, store: any KeyValueBackend, logger: Logger? = nil,
                onError: (@Sendable (SyncError) -> Void)? = nil) {
        storage = StoredValue(key, store: store, logger: logger, onError: onError)
    }

    public var wrappedValue: Value {
        get { storage.value }
        nonmutating set { storage.value = newValue }
    }

    /// The async API and the change stream of the same key.
    public var projectedValue: StoredValue<Value> { storage }
}

/// An observable handle on one key of one store (what `@Stored` projects).
/// `value` reads from the cache and registers with Observation, so SwiftUI
/// views and `withObservationTracking` re-run when the key changes here, in
/// another process sharing the file, or on the peer.
public final class StoredValue<Value: Codable & Sendable>: Observable, Sendable {
    public let key: Key<Value>
    public let store: any KeyValueBackend
    private let onError: @Sendable (SyncError) -> Void
    private let registrar = ObservationRegistrar()
    private let observation: ChangeObservation

    /// `onError` receives refused writes and failed reads; without it they
    /// are logged to `logger`, else to the store's logger.
    public init(_ key: Key<Value>, store: any KeyValueBackend, logger: Logger? = nil,
                onError: (@Sendable (SyncError) -> Void)? = nil) {
        self.key = key
        self.store = store
        self.onError = onError ?? StoredValue.logging(to: logger ?? StoredValue.logger(of: store))
        // Observers hear of a change as it commits, on the committing thread
        // (a local write, a replicated batch, another process's write).
        let subject = WeakSubject<StoredValue>()
        observation = store.observeChanges(matching: .key(key.name)) { _ in
            guard let self = subject.value else { return }
            self.registrar.withMutation(of: self, keyPath: \.value) {}
        }
        subject.value = self
    }

    deinit {
        observation.cancel()
    }

    /// The stored value, or the key's default; reading it is tracked by Observation.
    /// Setting it writes through (errors go to `onError`).
    public var value: Value {
        get {
            registrar.access(self, keyPath: \.value)
            do {
                return try store.value(for: key)
            } catch {
                onError(error as? SyncError ?? SyncError(.database, "\(error)"))
                return key.defaultValue
            }
        }
        set {
            do {
                try registrar.withMutation(of: self, keyPath: \.value) {
                    try store.setNow(newValue, for: key)
                }
            } catch {
                onError(error as? SyncError ?? SyncError(.database, "\(error)"))
            }
        }
    }

    /// Reads the value, throwing the store's errors.
    public func get() async throws -> Value { try await store.get(key) }
    /// Writes the value, throwing the store's errors. Commits off Swift
    /// concurrency's cooperative pool, as the store's `set` does.
    public func set(_ newValue: Value) async throws {
        registrar.willSet(self, keyPath: \.value)
        defer { registrar.didSet(self, keyPath: \.value) }
        try await store.set(newValue, for: key)
    }
    /// Removes the value (reads return the default again). Commits off the
    /// cooperative pool, as the store's `remove` does.
    public func remove() async throws {
        registrar.willSet(self, keyPath: \.value)
        defer { registrar.didSet(self, keyPath: \.value) }
        try await store.remove(key)
    }
    /// Whether a value is stored.
    public var isStored: Bool { (try? store.contains(key)) ?? false }
    /// Changes of this key after they commit, local and remote.
    public var changes: AsyncStream<StoreChange> { store.changes(for: key) }

    /// An `onError` that logs the refused write or failed read with the error's code and message.
    public static func logging(to logger: Logger) -> @Sendable (SyncError) -> Void {
        { error in logger.error("\(error)") }
    }

    /// The logger of the store behind `backend` (its `StoreOptions.logger`); a backend without one logs nowhere.
    static func logger(of backend: any KeyValueBackend) -> Logger {
        switch backend {
        case let store as SyncStore: store.logger
        case let files as FileValueStore: files.syncStore.logger
        case let replacing as ReplacingStore: logger(of: replacing.store)
        default: SyncStore.disabledLogger
        }
    }
}

/// A weak reference that can be set once the referent is fully initialized.
private final class WeakSubject<Subject: AnyObject & Sendable>: Sendable {
    private let reference = Mutex<WeakBox?>(nil)
    private struct WeakBox { weak var object: Subject? }

    var value: Subject? {
        get { reference.withLock { $0?.object } }
        set { reference.withLock { $0 = WeakBox(object: newValue) } }
    }
}

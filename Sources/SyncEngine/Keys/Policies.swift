/// Which device a store runs on.
public enum DeviceRole: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    case phone, watch

    /// The role of the other half of a pair.
    public var counterpart: DeviceRole { self == .phone ? .watch : .phone }
    public var description: String { rawValue }
}

/// Where a key's value may be written and in which direction it replicates.
public enum Availability: String, Sendable, Codable, CaseIterable {
    /// Written on both devices; replicates both ways.
    case all
    /// Written on the phone only; never replicates.
    case phoneOnly
    /// Written on the watch only; never replicates.
    case watchOnly
    /// Written on the phone; replicates phone → watch, where it is read-only.
    case phoneWithWatchSync

    /// Whether a device of `role` may write this key.
    public func canWrite(on role: DeviceRole) -> Bool {
        switch self {
        case .all: true
        case .phoneOnly, .phoneWithWatchSync: role == .phone
        case .watchOnly: role == .watch
        }
    }

    /// Whether a device of `role` ever holds a value of this key (it writes
    /// it, or receives it from its peer).
    public func isHeld(on role: DeviceRole) -> Bool {
        switch self {
        case .all, .phoneWithWatchSync: true
        case .phoneOnly: role == .phone
        case .watchOnly: role == .watch
        }
    }

    /// Whether values of this key travel from a device of `role` to its peer.
    public func replicates(from role: DeviceRole) -> Bool {
        switch self {
        case .all: true
        case .phoneWithWatchSync: role == .phone
        case .phoneOnly, .watchOnly: false
        }
    }
}

/// When a key's changes are sent to the peer.
public enum SyncPolicy: String, Sendable, Codable, CaseIterable {
    /// Never leaves the device.
    case never
    /// Queued until the app calls `sync()`.
    case manual
    /// Sent on its own shortly after the write when the serialized value is at
    /// most `SyncPolicy.automaticLimit` bytes; larger values are deferred to
    /// the next manual sync (reported, never dropped).
    case automaticSmall

    /// 100 KB: the largest serialized value (before compression) that moves automatically.
    public static let automaticLimit = 102_400
}

/// How a key's value is kept at rest.
public enum KeySecurity: String, Sendable, Codable, CaseIterable {
    case none
    /// AES-256-GCM at rest with a key derived from the store's master key.
    case encrypted
}

/// The queue a pending change waits in.
public enum SyncLane: Int, Sendable, Codable, CaseIterable {
    /// Not replicated.
    case none = 0
    /// Sent automatically.
    case automatic = 1
    /// Waits for the next manual `sync()`.
    case manual = 2
    /// A manual (or deferred) change released by `sync()`: sent like an automatic one.
    case released = 3

    /// Whether changes in this lane are in the stream the peers read.
    public var isSent: Bool { self == .automatic || self == .released }
}

import SyncTransport

/// What happens during sync, for people (logs, UI) and tests (wait on events, never sleep).
/// A key an event names is the key itself (a family member's name may be the
/// peer's: any text but NUL, up to 1,024 bytes); `description` shows it
/// escaped and bounded, as any peer text (`PeerText`).
public enum SyncEvent: Sendable, Equatable, CustomStringConvertible {
    /// A session with the peer is established.
    case connected(peerNode: UInt32, peerRole: DeviceRole)
    /// A session ended, and why: "the peer closed the connection", the
    /// error it failed with, or, when this side stopped it (its task
    /// cancelled: graceful shutdown, an app or node stopping), "stopped on
    /// this side: its task was cancelled …".
    case disconnected(reason: String)
    /// Keys declared differently by the peer: they do not sync until fixed.
    case keyMismatch(keys: [String])
    /// Batch `number` of `total` of a sync round was sent. A round begins
    /// with the first batch after the peer had everything and sends what was
    /// pending then; `total` is counted then and stays fixed (changes committed
    /// during the round fill its last batch if there is room, the rest go to
    /// the next round, which counts from 1 again). `total`
    /// is 0 when `events()` had no subscriber as the round began (not counted).
    case batchSent(number: Int, total: Int, entries: Int)
    /// Entries from the peer were applied (`applied` changed something).
    case received(entries: Int, applied: Int)
    /// A large value chunk was sent or received.
    case chunk(key: String, index: Int, count: Int, outgoing: Bool)
    /// A change of `key` from the peer met a concurrent one here: `winner` stayed, by `rule`.
    case conflictResolved(key: String, winner: ConflictWinner, rule: ConflictRule)
    /// An automaticSmall value over 100 KB waits for the next manual sync.
    case deferred(key: String, size: Int)
    /// A remote entry was refused because its version is too far ahead of this
    /// device's clock (`StoreOptions.maxRemoteClockAhead`; `aheadMilliseconds`
    /// says by how much) or malformed (`aheadMilliseconds` 0). Nothing changed.
    case versionRefused(key: String, aheadMilliseconds: Int64)
    /// The peer asked for this device's manual changes
    /// (`SyncPeer.requestManualChanges()`): `accepted` when
    /// `ReplicationConfiguration.answersManualRequests` allowed it, and how
    /// many entries that released for sending.
    case manualRequestReceived(accepted: Bool, released: Int)
    /// The peer answered this device's request for its manual changes: it
    /// released `released` entries (they follow), or it declined.
    case manualRequestAnswered(accepted: Bool, released: Int)
    /// Nothing is pending or in flight either way: this side sent everything
    /// and the peer said it has nothing more (with a protocol-1 peer, which
    /// cannot say, only this side's part).
    case idle
    /// A round of queued delivery (`SyncPeer.deliverQueued(through:)`) did
    /// something: it read `read` messages from the peer (applying
    /// `applied` entries), posted `posted` (on stable storage in the mailbox
    /// by now), and `acknowledged` when the peer's acknowledgement moved its cursor.
    /// `peerEvents()` names the mailbox's peer once this device has heard of it.
    case queuedDelivery(read: Int, applied: Int, posted: Int, acknowledged: Bool)
    case error(SyncError)
    /// This stream dropped the `count` events before the next one: it keeps
    /// the newest 10,000 its consumer has not read, and the consumer fell
    /// further behind. `peerEvents()` gives it with a nil peer.
    case eventsMissed(count: Int)

    public var description: String {
        switch self {
        case .connected(let node, let role): "connected to \(role) \(String(node, radix: 16))"
        case .disconnected(let reason): "disconnected: \(reason)"
        case .keyMismatch(let keys): "keys declared differently on the peer: \(keys.joined(separator: ", "))"
        case .batchSent(let n, let m, let entries): m > 0 ? "batch \(n) of \(m) sent (\(entries) entries)" : "batch \(n) sent (\(entries) entries)"
        case .received(let entries, let applied): "received \(entries) entries, \(applied) applied"
        case .chunk(let key, let index, let count, let outgoing): "\(outgoing ? "sent" : "received") chunk \(index + 1)/\(count) of \(PeerText.escaped(key))"
        case .conflictResolved(let key, let winner, let rule): "conflict on \(PeerText.escaped(key)): \(winner) wins by \(rule)"
        case .deferred(let key, let size): "\(PeerText.escaped(key)) (\(size) bytes) deferred to the next manual sync"
        case .versionRefused(let key, let ahead): "refused \(key): its version is \(ahead) ms ahead of this device's clock or malformed"
        case .manualRequestReceived(let accepted, let released):
            accepted ? "the peer asked for the manual changes: \(released) released" : "the peer asked for the manual changes: declined"
        case .manualRequestAnswered(let accepted, let released):
            accepted ? "the peer released \(released) manual changes" : "the peer declined to release its manual changes"
        case .idle: "idle"
        case .eventsMissed(let count): "\(count) events missed: this consumer fell more than 10,000 behind"
        case .queuedDelivery(let read, let applied, let posted, let acknowledged):
            "queued delivery: read \(read) (\(applied) applied), posted \(posted)\(acknowledged ? ", acknowledged" : "")"
        case .error(let error): "error: \(error)"
        }
    }
}

/// A sync event and the peer it concerns (a node id, as in `connected`), or
/// nil for an event about the store alone (such as `deferred` or `idle`).
public struct PeerEvent: Sendable, Equatable, CustomStringConvertible {
    public let peer: UInt32?
    public let event: SyncEvent
    /// The address of the peer it concerns when its node id is not known:
    /// `tcp:HOST:PORT` for a dial that failed (nothing answered, or the
    /// handshake failed), as `TCPListener.Rejection.peer` names a dialer.
    public let address: String?

    public init(peer: UInt32?, event: SyncEvent, address: String? = nil) {
        self.peer = peer
        self.event = event
        self.address = address
    }

    public var description: String {
        if let peer { return "[\(String(peer, radix: 16))] \(event)" }
        return address.map { "[\($0)] \(event)" } ?? event.description
    }
}

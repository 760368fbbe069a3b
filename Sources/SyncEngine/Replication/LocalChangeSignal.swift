import Synchronization

/// Whether a local commit's wake-up is already queued for the session loop.
final class LocalChangeSignal: Sendable {
    private let raised = Atomic<Bool>(false)
    private let peer = Atomic<UInt32>(SyncStore.thisDevice)

    /// The session's peer once known: what this session applied from it needs
    /// no wake-up (the loop sends what follows a received frame itself).
    var sessionPeer: UInt32 {
        get { peer.load(ordering: .relaxed) }
        set { peer.store(newValue, ordering: .relaxed) }
    }

    /// Whether a commit from `origin` (`SyncStore.thisDevice` or a peer) may have something for this session.
    func concerns(origin: UInt32) -> Bool { origin == SyncStore.thisDevice || origin != sessionPeer }

    /// Marks a commit; true when the loop must be woken (no wake-up was pending).
    func raise() -> Bool { !raised.exchange(true, ordering: .acquiringAndReleasing) }

    /// The loop took the wake-up: the next commit wakes it again.
    func lower() { raised.store(false, ordering: .releasing) }
}

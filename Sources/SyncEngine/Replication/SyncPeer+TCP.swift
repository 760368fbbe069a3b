import Synchronization
import SyncTransport

/// Starting a peer over TCP: the API an app uses, and the one `syncsim node` uses.
///
/// ```swift
/// let secret = try PairingSecret.load(from: "pair.secret")
/// let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
/// let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
/// await peer.serve(listener)                  // the phone: until the listener closes
/// await peer.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: secret))  // the watch
/// ```
extension SyncPeer {
    /// Runs one session per authenticated connection the listener accepts, at
    /// once (a phone serves each of its watches), until the listener closes or
    /// the task is cancelled; then waits for the sessions to end. Closing the
    /// store closes the listener and ends every session.
    public func serve(_ listener: TCPListener) async {
        let storeClosing = store.whenClosed { Task { await listener.close() } }
        defer { storeClosing.cancel() }
        // A discarding group: a session that ended leaves nothing behind (a phone that
        // serves for weeks while its watches come and go does not grow).
        await withDiscardingTaskGroup { group in
            // Not `listener.connections`: it would end for good with this task's cancellation,
            // and a later `serve` of the listener return at once while its watches waited.
            while let connection = await listener.nextConnection() {
                if Task.isCancelled {
                    await connection.close()
                    break
                }
                group.addTask { await self.run(over: connection) }
            }
        }
    }

    /// Keeps a session with the peer at `host:port` up: dials, runs the
    /// session, and redials with exponential backoff and jitter whenever the
    /// connection fails or ends, until the task is cancelled or the store
    /// closes. The backoff
    /// starts over only after a session that lasted 5 s: a peer that accepts
    /// and drops the connection, or refuses the session at once (another
    /// pairing, the wrong role), is redialed with growing delays. After a
    /// session that failed for a full device (`storage-full`), it waits
    /// `ReplicationConfiguration.storageFullRetryInterval` (or until a local
    /// write commits) before dialing again.
    public func maintainConnection(host: String, port: Int, configuration: TCPConfiguration,
                                   initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(10)) async {
        await maintainConnection(host: host, port: port, configuration: configuration,
                                 policy: ReconnectPolicy(initialDelay: initialDelay, maxDelay: maxDelay))
    }

    /// As above, with the whole `ReconnectPolicy` (delays, jitter, and how
    /// long a session must last for the backoff to start over: `resetAfter`).
    ///
    /// Dials through a `ReconnectingDialer` (the one reconnect loop of the
    /// package; its retries are logged to `configuration.logger`), and only
    /// while this store holds its file's replication lock: the peer never
    /// sees a second session for this device. Each failed dial is also an
    /// `.error` event with the transport's code (`not-connected` when nothing
    /// answered, `authentication-failed` for another pairing, …) and the
    /// peer's `PeerEvent.address`, `tcp:HOST:PORT`; a dial given up as the
    /// loop stops (cancelled, graceful shutdown) is none. A dial the peer
    /// refused (`authentication-failed`, `unsupported-version`: see
    /// `TransportError.Code.isPermanent`) is dialed again only after the
    /// policy's longest wait, until the devices are paired again or updated
    /// (or the address answers with the right peer again).
    public func maintainConnection(host: String, port: Int, configuration: TCPConfiguration, policy: ReconnectPolicy) async {
        let store = self.store
        let lock = ReplicationLockHold(store: store)
        let dialer = ReconnectingDialer(policy: policy, logger: configuration.logger) {
            try await lock.acquire()
            do {
                return try await TCPTransport.connect(host: host, port: port, configuration: configuration)
            } catch {
                lock.release()
                // A dial given up (the loop stopping: cancelled, graceful shutdown, the store or dialer
                // closed) did not fail to reach the peer: this side closed it.
                if Task.isCancelled { throw error }
                let permanent = (error as? TransportError)?.code.isPermanent == true
                let context = permanent
                    ? "the peer at \(host):\(port) refused this device; dialing it again after the longest wait (\(policy.maxDelay))"
                    : "cannot reach the peer at \(host):\(port)"
                store.emit(.error((error as? TransportError).map { SyncError($0, context: context) }
                                  ?? SyncError(.notConnected, "\(context): \(error)")),
                           address: "tcp:\(host):\(port)")
                throw error
            }
        }
        let storeClosing = store.whenClosed { Task { await dialer.close() } }
        defer { storeClosing.cancel() }
        for await connection in dialer {
            let ended = await runSession(over: connection)
            lock.release()
            if ended.failure?.code == .storageFull { await pauseWhileStorageIsFull() }
        }
        lock.release()
    }

    /// After a session failed because a device's storage is full (this
    /// one's, or the peer's): waits `configuration.storageFullRetryInterval`,
    /// or until a local write commits (there is room again), the task is
    /// cancelled or the store closes.
    func pauseWhileStorageIsFull() async {
        let interval = configuration.storageFullRetryInterval
        let writes = store.localWrites.subscribe(bufferingNewest: 1)  // before the wait is announced: a write then ends it
        store.timedWaits.publish(.storageFullPause(interval))
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: interval.cappedForSleep) }
            group.addTask { for await _ in writes { return } }
            await group.next()
            group.cancelAll()
        }
    }
}

/// The replication lock as one reconnect loop holds it: taken before each
/// dial, released when the dial failed or the session that followed ended.
/// One loop of a store holds it at a time: the sessions of one store share
/// its lock, so a second `maintainConnection` of the store (or of another
/// `SyncPeer` on it) dialed beside the first, and the phone, seeing two
/// sessions of one device, ended each older one as the newer began, for ever.
private final class ReplicationLockHold: Sendable {
    private let store: SyncStore
    private let held = Mutex(false)
    /// The stores one of whose reconnect loops holds the lock.
    private static let dialing = Mutex<Set<ObjectIdentifier>>([])

    init(store: SyncStore) {
        self.store = store
    }

    /// Waits until this store may replicate its file (another process or store
    /// may hold its lock, or its lock file cannot be opened for now: too many
    /// open files), looking again after 250 ms, then less and less often, up
    /// to every 2 s. Reports each reason to wait once as an `.error` event.
    /// Throws `CancellationError` when cancelled.
    func acquire() async throws {
        var reported: SyncError.Code?
        var looks = TickSchedule(base: .milliseconds(250), quiet: .seconds(2))
        while true {
            do throws(SyncError) {
                try takeDialing()
                do throws(SyncError) {
                    try ReplicationLock.acquire(for: store)
                } catch {
                    ReplicationLockHold.dialing.withLock { _ = $0.remove(ObjectIdentifier(store)) }
                    throw error
                }
                break
            } catch {
                try store.checkOpen()
                if reported != error.code { store.emit(.error(error)) }
                reported = error.code
            }
            store.timedWaits.publish(.replicationLock(looks.interval))
            try await Task.sleep(for: looks.interval)
            _ = looks.next(after: .tick(sent: false), quiet: true)
        }
        held.withLock { $0 = true }
    }

    /// Takes the store's one place for a reconnect loop; throws `replication-locked` while another loop has it.
    private func takeDialing() throws(SyncError) {
        try store.checkOpen()
        let taken = ReplicationLockHold.dialing.withLock { $0.insert(ObjectIdentifier(store)).inserted }
        guard taken else {
            throw SyncError(.replicationLocked, "another maintainConnection of the store at \(store.path) dials or runs a session (one device runs one session at a time); this one waits until it ends")
        }
    }

    /// Releases the lock if this loop holds it.
    func release() {
        let wasHeld = held.withLock { held -> Bool in
            defer { held = false }
            return held
        }
        if wasHeld {
            ReplicationLock.release(for: store)
            ReplicationLockHold.dialing.withLock { _ = $0.remove(ObjectIdentifier(store)) }
        }
    }
}

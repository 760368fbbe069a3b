import SyncTransport

/// Starting a peer over TCP: the API an app uses, and the one `syncsim node` uses.
///
/// ```swift
/// let secret = try PairingSecret.load(from: "pair.secret")
/// let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
/// let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
/// try await peer.serve(listener)              // the phone: until the listener closes
/// try await peer.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: secret))  // the watch
/// ```
extension SyncPeer {
    /// Runs one session per authenticated connection the listener accepts, at
    /// once (a phone serves each of its watches), until the listener closes or
    /// the task is cancelled; then waits for the sessions to end.
    public func serve(_ listener: TCPListener) async {
        await withTaskGroup(of: Void.self) { group in
            for await connection in listener.connections {
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
    /// connection fails or ends, until the task is cancelled. The backoff
    /// starts over only after a session that lasted 5 s: a peer that accepts
    /// and drops the connection, or refuses the session at once (another
    /// pairing, the wrong role), is redialed with growing delays.
    public func maintainConnection(host: String, port: Int, configuration: TCPConfiguration,
                                   initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(10)) async {
        await maintainConnection(host: host, port: port, configuration: configuration,
                                 policy: ReconnectPolicy(initialDelay: initialDelay, maxDelay: maxDelay))
    }

    /// As above, with the whole `ReconnectPolicy` (delays, jitter, and how
    /// long a session must last for the backoff to start over: `resetAfter`).
    public func maintainConnection(host: String, port: Int, configuration: TCPConfiguration, policy: ReconnectPolicy) async {
        var backoff = ReconnectBackoff(policy: policy)
        var waitingForLock = false
        while !Task.isCancelled {
            // Dial only when this process may replicate: the peer never sees a second session for this device.
            if !ReplicationLock.acquire(storePath: store.path) {
                if !waitingForLock { store.emit(.error(SyncPeer.lockedError(store.path))) }
                waitingForLock = true
                try? await Task.sleep(for: .milliseconds(250))  // a local check: cheap, so poll briskly
                continue
            }
            waitingForLock = false
            defer { ReplicationLock.release(storePath: store.path) }
            let delay: Duration
            do {
                let connection = try await TCPTransport.connect(host: host, port: port, configuration: configuration)
                let established = ContinuousClock.now
                await run(over: connection)
                delay = backoff.connectionEnded(after: .now - established)
            } catch {
                store.emit(.error(SyncError(.notConnected, "cannot reach the peer at \(host):\(port): \(error)")))
                delay = backoff.dialFailed()
            }
            if Task.isCancelled { break }
            try? await Task.sleep(for: delay)
        }
    }
}

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
    /// Runs one session per authenticated connection the listener accepts,
    /// one at a time (a store has one peer), until the listener closes or the task is cancelled.
    public func serve(_ listener: TCPListener) async {
        for await connection in listener.connections {
            if Task.isCancelled { await connection.close(); break }
            await run(over: connection)
        }
    }

    /// Keeps a session with the peer at `host:port` up: dials, runs the
    /// session, and redials with exponential backoff and jitter whenever the
    /// connection fails or ends, until the task is cancelled.
    public func maintainConnection(host: String, port: Int, configuration: TCPConfiguration,
                                   initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(10)) async {
        var delay = initialDelay
        var random = SystemRandomNumberGenerator()
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
            do {
                let connection = try await TCPTransport.connect(host: host, port: port, configuration: configuration)
                delay = initialDelay
                await run(over: connection)
            } catch {
                store.emit(.error(SyncError(.notConnected, "cannot reach the peer at \(host):\(port): \(error)")))
            }
            if Task.isCancelled { break }
            let jitter = Double.random(in: 0.5...1.0, using: &random)
            try? await Task.sleep(for: delay * jitter)
            delay = min(delay * 2, maxDelay)
        }
    }
}

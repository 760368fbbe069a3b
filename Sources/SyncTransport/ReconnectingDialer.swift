import Logging
import Synchronization

/// Keeps dialing a peer: an async sequence that yields a new authenticated
/// connection each time the previous one ended, retrying failed attempts
/// with the `ReconnectPolicy`'s backoff, until it is closed or the iterating
/// task is cancelled.
///
/// ```swift
/// let dialer = ReconnectingDialer(host: "127.0.0.1", port: port, configuration: config)
/// for await connection in dialer {
///     await session.run(over: connection)   // returns when the connection ended
/// }
/// ```
/// Asking for the next connection closes the previous one if it is still
/// open, and waits before redialing: `initialDelay` after a connection that
/// stayed up at least `ReconnectPolicy.resetAfter`, and a growing delay after
/// one that ended sooner, so a peer that accepts and drops (or refuses the
/// session) at once is not hammered. Iterate from one task at a time.
///
/// A dial the peer refuses (`TransportError.Code.isPermanent`: it holds
/// another pairing, or shares no wire version with us) is dialed again only
/// after the policy's longest wait, not hammered: no quicker retry can mend
/// it, but the devices may be paired again or updated, or the address may
/// answer with the right peer again. The logger has the first refusal of a
/// run as an error (the later ones at debug), and `permanentFailure` says why
/// until a dial connects.
public final class ReconnectingDialer: AsyncSequence, Sendable {
    public typealias Element = any FrameConnection

    private struct State {
        var current: (any FrameConnection)?
        var established: ContinuousClock.Instant?
        var backoff: ReconnectBackoff
        var attempts = 0
        /// The refusal of the last dial, until a dial connects.
        var permanentFailure: TransportError?
    }

    private let policy: ReconnectPolicy
    private let connect: @Sendable () async throws -> any FrameConnection
    private let sleep: @Sendable (Duration) async throws -> Void
    private let logger: Logger
    private let closed = Latch()
    private let state: Mutex<State>

    /// Dials with `connect`, which returns an established connection or throws.
    /// `seed` makes the jitter reproducible; by default it is random.
    public convenience init(
        policy: ReconnectPolicy = .init(), seed: UInt64 = .random(in: 0...UInt64.max),
        logger: Logger = Logger(label: "SyncTransport", factory: { _ in SwiftLogNoOpLogHandler() }),
        connect: @escaping @Sendable () async throws -> any FrameConnection
    ) {
        self.init(policy: policy, seed: seed, logger: logger, sleep: ReconnectingDialer.timerSleep, connect: connect)
    }

    /// The wait between attempts: `Task.sleep`, for at most
    /// `Duration.longestSleep` (a policy's "never", `.seconds(Int64.max)`,
    /// trapped in it).
    static let timerSleep: @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0.cappedForSleep) }

    /// As above, with the wait between attempts replaced (tests record the delays chosen,
    /// or are told when `timerSleep` begins).
    init(
        policy: ReconnectPolicy, seed: UInt64,
        logger: Logger = Logger(label: "SyncTransport", factory: { _ in SwiftLogNoOpLogHandler() }),
        sleep: @escaping @Sendable (Duration) async throws -> Void,
        connect: @escaping @Sendable () async throws -> any FrameConnection
    ) {
        self.policy = policy
        self.connect = connect
        self.sleep = sleep
        self.logger = logger
        self.state = Mutex(State(backoff: ReconnectBackoff(policy: policy, seed: seed)))
    }

    /// Dials `host:port` with `TCPTransport.connect`.
    public convenience init(
        host: String, port: Int, configuration: TCPConfiguration, policy: ReconnectPolicy = .init()
    ) {
        self.init(policy: policy, logger: configuration.logger) {
            try await TCPTransport.connect(host: host, port: port, configuration: configuration)
        }
    }

    /// The number of dial attempts so far, successful or not.
    public var attempts: Int { state.withLock { $0.attempts } }

    /// How the peer refused the last dial (`TransportError.Code.isPermanent`:
    /// another pairing, no wire version in common), while the dialer waits
    /// the policy's longest delay between dials; nil once a dial connects,
    /// and when the last dial failed otherwise.
    public var permanentFailure: TransportError? { state.withLock { $0.permanentFailure } }

    /// Stops dialing, closes the current connection and ends the sequence.
    public func close() async {
        closed.open()
        let current = state.withLock { state -> (any FrameConnection)? in
            defer { state.current = nil }
            return state.current
        }
        await current?.close()
    }

    /// Creates the iterator.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(dialer: self)
    }

    /// Yields connections; `nil` once the dialer is closed or the task cancelled.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let dialer: ReconnectingDialer

        /// Closes the previous connection if still open, then dials until a
        /// connection is established; nil once the dialer is closed or the task cancelled.
        public mutating func next() async -> (any FrameConnection)? {
            await dialer.nextConnection()
        }
    }

    private func nextConnection() async -> (any FrameConnection)? {
        let (previous, established) = state.withLock { state -> ((any FrameConnection)?, ContinuousClock.Instant?) in
            defer {
                state.current = nil
                state.established = nil
            }
            return (state.current, state.established)
        }
        if let previous {
            await previous.close()
            // Closed or cancelled (the app or node stopping): no backoff to announce.
            if closed.isOpen || Task.isCancelled { return nil }
            let lasted = ContinuousClock.now - (established ?? .now)
            let delay = state.withLock { $0.backoff.connectionEnded(after: lasted) }
            if lasted < policy.resetAfter {
                logger.info(
                    "the connection ended soon after it was established; backing off",
                    metadata: ["lasted": "\(lasted)", "retryIn": "\(delay)"])
            }
            guard await pause(delay) else { return nil }
        }
        while !closed.isOpen, !Task.isCancelled {
            state.withLock { $0.attempts += 1 }
            do {
                guard let connection = try await dial() else { return nil }
                let accepted = state.withLock { state -> Bool in
                    guard !closed.isOpen else { return false }
                    state.current = connection
                    state.established = .now
                    state.permanentFailure = nil
                    return true
                }
                guard accepted else {
                    await connection.close()
                    return nil
                }
                return connection
            } catch let refusal as TransportError where refusal.code.isPermanent && !closed.isOpen && !Task.isCancelled {
                // No quicker retry mends a refusal: the longest wait, and one error log per run of them.
                let (delay, first, attempts) = state.withLock { state -> (Duration, Bool, Int) in
                    let first = state.permanentFailure?.code != refusal.code
                    state.permanentFailure = refusal
                    return (state.backoff.dialRefused(), first, state.attempts)
                }
                let metadata: Logger.Metadata = ["reason": "\(refusal)", "code": "\(refusal.code)", "attempts": "\(attempts)", "retryIn": "\(delay)"]
                if first {
                    logger.error("the peer refused the dial; dialing it again after the longest wait", metadata: metadata)
                } else {
                    logger.debug("the peer refused the dial again", metadata: metadata)
                }
                guard await pause(delay) else { return nil }
            } catch {
                let (delay, failures) = state.withLock { state -> (Duration, Int) in
                    state.permanentFailure = nil
                    return (state.backoff.dialFailed(), state.backoff.failures)
                }
                logger.warning(
                    "dial attempt failed",
                    metadata: ["reason": "\(error)", "failures": "\(failures)", "retryIn": "\(delay)"])
                guard await pause(delay) else { return nil }
            }
        }
        return nil
    }

    /// `connect()`, cancelled once the dialer is closed (a dial may otherwise wait out
    /// a connect or handshake timeout first); nil when the dialer was closed first.
    private func dial() async throws -> (any FrameConnection)? {
        let connect = self.connect
        let closed = self.closed
        return try await withThrowingTaskGroup(of: (any FrameConnection)?.self) { group in
            group.addTask { try await connect() }
            group.addTask {
                await closed.wait()
                return nil
            }
            do {
                if let connection = try await group.next() ?? nil {
                    group.cancelAll()
                    return connection
                }
            } catch {
                group.cancelAll()
                throw error
            }
            // Closed (or cancelled) first: the dial is cancelled, and a connection it made all the same is closed.
            group.cancelAll()
            while let result = try? await group.next() {
                if let connection = result { await connection.close() }
            }
            return nil
        }
    }

    /// Sleeps for `delay`; `false` if the dialer was closed or the task cancelled first.
    private func pause(_ delay: Duration) async -> Bool {
        let closed = self.closed
        let sleep = self.sleep
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                do {
                    try await sleep(delay)
                    return true
                } catch {
                    return false
                }
            }
            group.addTask {
                await closed.wait()
                return false
            }
            let result = await group.next() ?? false
            group.cancelAll()
            return result && !Task.isCancelled && !closed.isOpen
        }
    }
}

import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Accepts TCP connections and yields those that passed the handshake.
///
/// A peer that fails the handshake (wrong secret, unknown pairing, no common
/// version, garbage, timeout) is closed and never appears in `connections`;
/// the reason and the peer's address are logged (a warning to
/// `TCPConfiguration.logger`) and reported on `rejections` and `rejectionReports`,
/// at most `TCPConfiguration.rejectionReportLimit` at a time (a flood of
/// strangers is summed up with a count, never logged line by line).
///
/// One listener serves several pairings (a phone with several watches):
/// `TCPConfiguration.secret` and `additionalSecrets`. Each connection tells
/// which one it authenticated with (`FrameConnection.pairingEpoch`).
///
/// A `Service` (swift-service-lifecycle): `init` binds the socket and starts
/// nothing; `run()` accepts (each handshake a child task of `run()`) until
/// graceful shutdown, cancellation or `close()`, then closes the handshakes
/// still under way and returns.
/// ```swift
/// let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: configuration)
/// let group = ServiceGroup(services: [listener], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// ```
/// `bind(host:port:configuration:)` is the same listener already running
/// `run()` in a task of its own, ended by `close()`.
public final class TCPListener: Service, Sendable {
    /// One report on `rejectionReports`: a rejected peer's reason, and how
    /// many rejections before it were not reported one by one (rate limit).
    public struct Rejection: Sendable, Equatable, CustomStringConvertible {
        /// Why this peer was turned away.
        public var reason: TransportError
        /// Rejections not reported on their own since the previous report.
        /// Each report stands for `1 + suppressed` rejected peers.
        public var suppressed: Int
        /// The rejected peer's address, such as `tcp:127.0.0.1:4321` (nil when unknown).
        public var peer: String?

        public init(reason: TransportError, suppressed: Int, peer: String? = nil) {
            self.reason = reason
            self.suppressed = suppressed
            self.peer = peer
        }

        public var description: String {
            suppressed == 0 ? "\(reason)" : "\(reason) (and \(suppressed) more not reported)"
        }
    }

    /// The port actually bound (useful after binding port 0).
    public let port: Int
    /// Authenticated connections, in the order their handshakes finished.
    /// Finishes once the listener stopped (`close()`, or `run()` returned);
    /// the connections not taken from it by then are closed. Iterate it from one task.
    public let connections: AsyncStream<any FrameConnection>
    /// Why peers were turned away (the newest 64 are kept until read), rate
    /// limited like `rejectionReports`, which also gives the suppressed counts.
    public let rejections: AsyncStream<TransportError>
    /// Rejections with the number not reported one by one (the newest 64 are
    /// kept until read). Finishes once the listener stopped, with a last
    /// report for any suppressed ones.
    public let rejectionReports: AsyncStream<Rejection>

    private enum Phase { case bound, running, stopped }

    private let server: NIOAsyncChannel<TransportChannel, Never>
    private let children: ChildChannelRegistry
    private let configuration: TCPConfiguration
    /// The pairings of `configuration`, by id: built once, looked up by every handshake.
    private let pairings: ListenerPairings
    /// Authenticated connections until `connections` hands them out.
    private let untaken: AsyncBoundedQueue<any FrameConnection>
    /// How many authenticated connections wait to be taken from `connections` (for tests).
    var untakenConnections: Int { untaken.usedCost }
    /// Each time a task begins to wait for the next authenticated connection:
    /// how many wait now (for tests).
    package let takerWaits: AsyncStream<Int>
    /// Connections accepted whose handshake has not ended yet (at most `maxPendingHandshakes`).
    private let handshakes = Mutex(0)
    /// How many accepted connections are in their handshake (for tests).
    var pendingHandshakes: Int { handshakes.withLock { $0 } }
    private let reporter: RejectionReporter
    private let logger: Logger
    private let phase = Mutex(Phase.bound)
    private let stopped = Latch()

    /// Listens on `host:port` (port 0 picks a free port; see `port`), and
    /// accepts nothing until `run()`. Throws `.connectFailed` when the
    /// address cannot be bound, or `port` is not within 0...65535.
    public init(host: String, port: Int, configuration: TCPConfiguration) async throws {
        // Owns each accepted channel from its initializer on, so that none is
        // ever dropped without `executeThenClose` (apple/swift-nio #2637).
        try TCPTransport.checkPort(port, "cannot listen on \(host):\(port)")
        let children = ChildChannelRegistry()
        let acceptFailures = AcceptFailureReporter()
        let server: NIOAsyncChannel<TransportChannel, Never>
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .serverChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(acceptFailures) }
                }
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelOption(.writeBufferWaterMark, value: TCPTransport.waterMark(configuration))
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        var child = try TCPTransport.configurePipeline(channel, handshakeFrames: 2, configuration: configuration)
                        child.peer = TCPTransport.describePeer(channel)
                        children.register(child)
                        return child
                    }
                }
        } catch {
            throw TransportError(.connectFailed, "cannot listen on \(host):\(port): \(error)")
        }
        let boundPort = server.channel.localAddress?.port ?? port
        var logger = configuration.logger
        logger[metadataKey: "listener"] = "\(host):\(boundPort)"
        let reporter = RejectionReporter(limit: configuration.rejectionReportLimit, logger: logger)
        acceptFailures.reporter.withLock { $0 = reporter }
        let (takerWaits, takerWaited) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(8))
        self.takerWaits = takerWaits
        let untaken = AsyncBoundedQueue<any FrameConnection>(capacity: .max, onConsumerWait: { takerWaited.yield($0) })
        self.untaken = untaken
        connections = AsyncStream(unfolding: { (try? await untaken.pop()) ?? nil })
        self.port = boundPort
        self.server = server
        self.children = children
        self.configuration = configuration
        let pairings = ListenerPairings(configuration)
        self.pairings = pairings
        self.reporter = reporter
        self.logger = logger
        rejections = reporter.rejections
        rejectionReports = reporter.reports
        logger.info("listening", metadata: ["pairings": "\(pairings.count)"])
    }

    /// A listener released without `run()` or `close()` (the app's setup failed
    /// after `init`, say) closes its socket: no task holds it, and its port
    /// would stay bound, its descriptor open, for the life of the process.
    deinit {
        guard phase.withLock({ $0 == .bound }) else { return }
        server.channel.close(promise: nil)
        let children = self.children
        Task { await children.closeRemaining() }
        _ = untaken.finishTakingQueued()
        reporter.finish()
    }

    /// The next authenticated connection, as `connections` yields them; nil once
    /// the listener stopped, or when the calling task is cancelled. A cancelled
    /// wait leaves the listener's connections to later calls (`SyncPeer.serve`
    /// again), where `connections`, an `AsyncStream`, ends for good once the task
    /// iterating it is cancelled.
    package func nextConnection() async -> (any FrameConnection)? {
        (try? await untaken.pop()) ?? nil
    }

    /// Listens on `host:port` (port 0 picks a free port; see `port`) and
    /// accepts at once: `run()` runs in a task of its own until `close()`.
    /// Throws `.connectFailed` when the address cannot be bound, or `port`
    /// is not within 0...65535.
    public static func bind(host: String, port: Int, configuration: TCPConfiguration) async throws -> TCPListener {
        let listener = try await TCPListener(host: host, port: port, configuration: configuration)
        // The one task SyncTransport starts for a listener, for callers without
        // a service group; `close()` ends it and waits for it.
        Task { try? await listener.run() }
        return listener
    }

    /// Accepts connections and runs each handshake as a child task, until
    /// graceful shutdown, cancellation or `close()`; then stops accepting,
    /// closes the handshakes still under way (and any connection accepted but
    /// not started), finishes `connections`, `rejections` and
    /// `rejectionReports`, and returns. Established connections taken from
    /// `connections` stay open (they belong to whoever took them); those not
    /// taken are closed.
    ///
    /// Called on a listener that already runs (`bind`) or stopped, it waits
    /// until the listener stopped; graceful shutdown or cancellation closes it.
    /// Throws a `TransportError` if the socket fails while accepting.
    public func run() async throws {
        let owner = phase.withLock { phase -> Bool in
            guard phase == .bound else { return false }
            phase = .running
            return true
        }
        let channel = server.channel
        guard owner else {
            await withTaskCancellationOrGracefulShutdownHandler {
                await stopped.wait()
            } onCancelOrGracefulShutdown: {
                channel.close(promise: nil)
            }
            return
        }
        var failure: TransportError?
        do {
            try await withTaskCancellationOrGracefulShutdownHandler {
                try await acceptLoop()
            } onCancelOrGracefulShutdown: {
                channel.close(promise: nil)
            }
        } catch {
            if !Task.isCancelled, !(error is CancellationError) {
                logger.warning("stopped accepting", metadata: ["reason": "\(error)"])
                failure = TransportError(.connectFailed, "the listener on port \(port) stopped accepting: \(error)")
            }
        }
        await finish()
        if let failure { throw failure }
    }

    /// Stops accepting, closes the connections still in their handshake (and
    /// any accepted but not yet started), reports what the rate limit held
    /// back, and finishes `connections`, `rejections` and `rejectionReports`.
    /// Established connections taken from `connections` stay open (close them
    /// on their own); those not taken are closed.
    public func close() async {
        let neverRan = phase.withLock { phase -> Bool in
            guard phase == .bound else { return false }
            phase = .stopped
            return true
        }
        if neverRan {
            try? await server.executeThenClose { _ in }
            await finish()
        } else {
            server.channel.close(promise: nil)
            await stopped.wait()
        }
    }

    private func acceptLoop() async throws {
        let children = self.children
        let configuration = self.configuration
        let untaken = self.untaken
        let reporter = self.reporter
        try await server.executeThenClose { inbound in
            // Handshakes run as child tasks: stopping cancels (and so closes)
            // those still under way, and waits for them.
            try await withThrowingDiscardingTaskGroup { group in
                for try await accepted in inbound {
                    guard let child = children.take(accepted) else { continue }
                    let peer = child.peer ?? TCPTransport.describePeer(child.asyncChannel.channel)
                    let limit = configuration.maxPendingHandshakes
                    let admitted = handshakes.withLock { count -> Bool in
                        guard count < max(1, limit) else { return false }
                        count += 1
                        return true
                    }
                    guard admitted else {
                        // Strangers that never finish their handshake must not hold every descriptor.
                        group.addTask {
                            try? await child.asyncChannel.executeThenClose { _, _ in }
                            reporter.report(TransportError(.tooManyConnections, "\(limit) connections are already in their handshake (TCPConfiguration.maxPendingHandshakes); this one was closed before its own began"), peer: peer)
                        }
                        continue
                    }
                    group.addTask {
                        do {
                            let connection = try await self.establishCounted(child, configuration: configuration)
                            let queued: Bool
                            do {
                                queued = try untaken.pushIfWithin(configuration.maxUntakenConnections, connection, cost: 1)
                            } catch {
                                await connection.close()  // the listener stopped meanwhile
                                return
                            }
                            if !queued {
                                await connection.close()
                                reporter.report(TransportError(.tooManyConnections, "\(configuration.maxUntakenConnections) authenticated connections already wait to be taken from the listener's connections; this one was closed"), peer: peer)
                            }
                        } catch {
                            // Not a rejection when we closed it ourselves.
                            if !Task.isCancelled { reporter.report(TCPConnection.transportError(error), peer: peer) }
                        }
                    }
                }
                group.cancelAll()
            }
        }
    }

    /// The listener's handshake on an accepted channel, counted in `handshakes` until it ends.
    private func establishCounted(_ child: TransportChannel, configuration: TCPConfiguration) async throws -> TCPConnection {
        defer { handshakes.withLock { $0 -= 1 } }
        return try await TCPTransport.establish(child, role: .listener, configuration: configuration, pairings: pairings)
    }

    /// After accepting ended: closes what the loop never took, finishes the streams.
    private func finish() async {
        // Channels accepted but not taken by the loop (still queued in the
        // server's stream when it closed), and any whose initializer runs
        // from now on, are closed here.
        await children.closeRemaining()
        // Established connections nobody took: no one else can close them (each
        // close may wait out a grace period for its peer to read: all at once).
        let orphans = untaken.finishTakingQueued()
        await withTaskGroup(of: Void.self) { group in
            for connection in orphans { group.addTask { await connection.close() } }
        }
        reporter.finish()
        phase.withLock { $0 = .stopped }
        logger.info("stopped listening")
        stopped.open()
    }
}

/// Holds a strong reference to every child channel from the moment the
/// server's child initializer wrapped it (on its event loop) until the accept
/// loop takes it for its task, which runs it with `executeThenClose`. Once
/// the loop is over, `closeRemaining()` closes every child still held, and
/// any child registered afterwards is closed at once: an accepted
/// `NIOAsyncChannel` is never dropped unclosed (dropping one aborts the
/// process: "Deinited NIOAsyncWriter without calling finish()").
final class ChildChannelRegistry: Sendable {
    private struct State {
        var children: [ObjectIdentifier: TransportChannel] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    /// Takes ownership of a fresh child; closes it at once if the loop is over.
    func register(_ child: TransportChannel) {
        let late = state.withLock { state -> Bool in
            guard !state.closed else { return true }
            state.children[ObjectIdentifier(child.asyncChannel.channel)] = child
            return false
        }
        if late { Task { await Self.close(child) } }
    }

    /// Hands a child over to the caller, who must run it with `executeThenClose`.
    /// `nil` if the registry does not hold it (it was closed already).
    func take(_ child: TransportChannel) -> TransportChannel? {
        state.withLock { $0.children.removeValue(forKey: ObjectIdentifier(child.asyncChannel.channel)) }
    }

    /// Closes every child still held; children registered later are closed at once.
    func closeRemaining() async {
        let remaining = state.withLock { state -> [TransportChannel] in
            state.closed = true
            defer { state.children = [:] }
            return Array(state.children.values)
        }
        await withTaskGroup(of: Void.self) { group in
            for child in remaining {
                group.addTask { await Self.close(child) }
            }
        }
    }

    private static func close(_ child: TransportChannel) async {
        try? await child.asyncChannel.executeThenClose { _, _ in }
    }
}

/// Reports a failed `accept` (out of file descriptors, say) as a rejection:
/// NIO's accept backoff, after it on the server channel's pipeline, retries a
/// second later and says nothing, so a phone out of descriptors would turn
/// its watches away in silence.
private final class AcceptFailureReporter: ChannelInboundHandler, Sendable {
    typealias InboundIn = Any
    /// Set once the listener is bound (it names the bound port in its logs).
    let reporter = Mutex<RejectionReporter?>(nil)

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is IOError {
            reporter.withLock { $0 }?.report(TransportError(
                .tooManyConnections, "could not accept a connection (\(error)); accepting again in 1 s"))
        }
        context.fireErrorCaught(error)
    }
}

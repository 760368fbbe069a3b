import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Accepts TCP connections and yields those that passed the handshake.
///
/// A peer that fails the handshake (wrong secret, no common version,
/// garbage, timeout) is closed and never appears in `connections`; the
/// reason is logged and reported on `rejections` and `rejectionReports`,
/// at most `TCPConfiguration.rejectionReportLimit` at a time (a flood of
/// strangers is summed up with a count, never logged line by line).
public final class TCPListener: Sendable {
    /// One report on `rejectionReports`: a rejected peer's reason, and how
    /// many rejections before it were not reported one by one (rate limit).
    public struct Rejection: Sendable, Equatable, CustomStringConvertible {
        /// Why this peer was turned away.
        public var reason: TransportError
        /// Rejections not reported on their own since the previous report.
        /// Each report stands for `1 + suppressed` rejected peers.
        public var suppressed: Int

        public init(reason: TransportError, suppressed: Int) {
            self.reason = reason
            self.suppressed = suppressed
        }

        public var description: String {
            suppressed == 0 ? "\(reason)" : "\(reason) (and \(suppressed) more not reported)"
        }
    }

    /// The port actually bound (useful after binding port 0).
    public let port: Int
    /// Authenticated connections, in the order their handshakes finished.
    /// Finishes after `close()`. Iterate it from one task.
    public let connections: AsyncStream<any FrameConnection>
    /// Why peers were turned away (the newest 64 are kept until read), rate
    /// limited like `rejectionReports`, which also gives the suppressed counts.
    public let rejections: AsyncStream<TransportError>
    /// Rejections with the number not reported one by one (the newest 64 are
    /// kept until read). Finishes after `close()`, with a last report for any
    /// suppressed ones.
    public let rejectionReports: AsyncStream<Rejection>

    private let serverChannel: any Channel
    private let acceptLoopDone = Latch()

    private init(
        port: Int, serverChannel: any Channel, connections: AsyncStream<any FrameConnection>,
        rejections: AsyncStream<TransportError>, rejectionReports: AsyncStream<Rejection>
    ) {
        self.port = port
        self.serverChannel = serverChannel
        self.connections = connections
        self.rejections = rejections
        self.rejectionReports = rejectionReports
    }

    /// Listens on `host:port` (port 0 picks a free port; see `port`).
    /// Throws `.connectFailed` when the address cannot be bound.
    public static func bind(host: String, port: Int, configuration: TCPConfiguration) async throws -> TCPListener {
        // Owns each accepted channel from its initializer on, so that none is
        // ever dropped without `executeThenClose` (apple/swift-nio #2637).
        let children = ChildChannelRegistry()
        let server: NIOAsyncChannel<TransportChannel, Never>
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelOption(.writeBufferWaterMark, value: TCPTransport.waterMark(configuration))
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let child = try TCPTransport.configurePipeline(channel, handshakeFrames: 2, configuration: configuration)
                        children.register(child)
                        return child
                    }
                }
        } catch {
            throw TransportError(.connectFailed, "cannot listen on \(host):\(port): \(error)")
        }
        let boundPort = server.channel.localAddress?.port ?? port
        let (connections, connectionSink) = AsyncStream.makeStream(of: (any FrameConnection).self)
        var logger = configuration.logger
        logger[metadataKey: "listener"] = "\(host):\(boundPort)"
        let reporter = RejectionReporter(limit: configuration.rejectionReportLimit, logger: logger)
        let listener = TCPListener(
            port: boundPort, serverChannel: server.channel, connections: connections,
            rejections: reporter.rejections, rejectionReports: reporter.reports)
        logger.info("listening")
        let done = listener.acceptLoopDone
        Task {
            do {
                try await server.executeThenClose { inbound in
                    // Handshakes run as child tasks: closing the listener cancels
                    // (and so closes) those still under way, and waits for them.
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await accepted in inbound {
                            guard let child = children.take(accepted) else { continue }
                            group.addTask {
                                do {
                                    let connection = try await TCPTransport.establish(
                                        child, role: .listener, configuration: configuration)
                                    if case .terminated = connectionSink.yield(connection) {
                                        await connection.close()
                                    }
                                } catch {
                                    // Not a rejection when we closed it ourselves.
                                    if !Task.isCancelled { reporter.report(TCPConnection.transportError(error)) }
                                }
                            }
                        }
                        group.cancelAll()
                    }
                }
            } catch {
                logger.warning("stopped accepting", metadata: ["reason": "\(error)"])
            }
            // Channels accepted but not taken by the loop (still queued in the
            // server's stream when it closed), and any whose initializer runs
            // from now on, are closed here.
            await children.closeRemaining()
            connectionSink.finish()
            reporter.finish()
            logger.info("stopped listening")
            done.open()
        }
        return listener
    }

    /// Stops accepting, closes the connections still in their handshake (and
    /// any accepted but not yet started), reports what the rate limit held
    /// back, and finishes `connections`, `rejections` and `rejectionReports`.
    /// Connections already established stay open; close them on their own.
    public func close() async {
        serverChannel.close(promise: nil)
        await acceptLoopDone.wait()
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

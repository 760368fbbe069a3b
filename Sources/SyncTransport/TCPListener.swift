import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Accepts TCP connections and yields those that passed the handshake.
///
/// A peer that fails the handshake (wrong secret, no common version,
/// garbage, timeout) is logged with the reason, reported on `rejections`,
/// and closed; it never appears in `connections`.
public final class TCPListener: Sendable {
    /// The port actually bound (useful after binding port 0).
    public let port: Int
    /// Authenticated connections, in the order their handshakes finished.
    /// Finishes after `close()`. Iterate it from one task.
    public let connections: AsyncStream<any FrameConnection>
    /// Why peers were turned away (the newest 64 are kept until read).
    public let rejections: AsyncStream<TransportError>

    private let serverChannel: any Channel
    private let acceptLoopDone = Latch()

    private init(
        port: Int, serverChannel: any Channel,
        connections: AsyncStream<any FrameConnection>, rejections: AsyncStream<TransportError>
    ) {
        self.port = port
        self.serverChannel = serverChannel
        self.connections = connections
        self.rejections = rejections
    }

    /// Listens on `host:port` (port 0 picks a free port; see `port`).
    /// Throws `.connectFailed` when the address cannot be bound.
    public static func bind(host: String, port: Int, configuration: TCPConfiguration) async throws -> TCPListener {
        let server: NIOAsyncChannel<TransportChannel, Never>
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelOption(.writeBufferWaterMark, value: TCPTransport.waterMark(configuration))
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try TCPTransport.configurePipeline(channel, handshakeFrames: 2, configuration: configuration)
                    }
                }
        } catch {
            throw TransportError(.connectFailed, "cannot listen on \(host):\(port): \(error)")
        }
        let boundPort = server.channel.localAddress?.port ?? port
        let (connections, connectionSink) = AsyncStream.makeStream(of: (any FrameConnection).self)
        let (rejections, rejectionSink) = AsyncStream.makeStream(
            of: TransportError.self, bufferingPolicy: .bufferingNewest(64))
        let listener = TCPListener(
            port: boundPort, serverChannel: server.channel, connections: connections, rejections: rejections)
        var logger = configuration.logger
        logger[metadataKey: "listener"] = "\(host):\(boundPort)"
        logger.info("listening")
        let done = listener.acceptLoopDone
        Task {
            do {
                try await server.executeThenClose { inbound in
                    for try await child in inbound {
                        Task {
                            do {
                                let connection = try await TCPTransport.establish(
                                    child, role: .listener, configuration: configuration)
                                if case .terminated = connectionSink.yield(connection) {
                                    await connection.close()
                                }
                            } catch {
                                rejectionSink.yield(TCPConnection.transportError(error))
                            }
                        }
                    }
                }
            } catch {
                logger.warning("stopped accepting", metadata: ["reason": "\(error)"])
            }
            connectionSink.finish()
            rejectionSink.finish()
            logger.info("stopped listening")
            done.open()
        }
        return listener
    }

    /// Stops accepting and finishes `connections`. Connections already
    /// established stay open; close them on their own.
    public func close() async {
        serverChannel.close(promise: nil)
        await acceptLoopDone.wait()
    }
}

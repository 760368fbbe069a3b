import ServiceLifecycle
import SyncTransport

extension SyncPeer {
    /// The phone's side as a swift-service-lifecycle `Service`: `run()` runs
    /// the listener and one session per connection it accepts, each a child
    /// task; graceful shutdown, cancellation or closing the store stops
    /// accepting, ends every session (each peer sees its connection close) and
    /// returns.
    ///
    /// ```swift
    /// let listener = try await TCPListener(host: "0.0.0.0", port: 7000, configuration: TCPConfiguration(secrets: watchSecrets))
    /// let group = ServiceGroup(services: [peer.serving(listener)], gracefulShutdownSignals: [.sigterm], logger: logger)
    /// try await group.run()
    /// ```
    public func serving(_ listener: TCPListener) -> ServingService { ServingService(peer: self, listener: listener) }

    /// The watch's side as a `Service`: `run()` keeps a session with the peer
    /// at `host:port` up (`maintainConnection`) until graceful shutdown,
    /// cancellation or closing the store, which ends the session and returns.
    public func dialing(host: String, port: Int, configuration: TCPConfiguration,
                        policy: ReconnectPolicy = ReconnectPolicy()) -> DialingService {
        DialingService(peer: self, host: host, port: port, configuration: configuration, policy: policy)
    }

    /// `SyncPeer.serving(_:)`.
    public struct ServingService: Service {
        public let peer: SyncPeer
        public let listener: TCPListener

        public func run() async throws {
            try await withThrowingDiscardingTaskGroup { group in
                // The listener stops accepting by itself at graceful shutdown; the sessions
                // are cancelled then, as they would never end on their own.
                group.addTask { try await listener.run() }
                group.addTask {
                    await cancelWhenGracefulShutdown { await peer.serve(listener) }
                }
            }
        }
    }

    /// `SyncPeer.dialing(host:port:configuration:policy:)`.
    public struct DialingService: Service {
        public let peer: SyncPeer
        public let host: String
        public let port: Int
        public let configuration: TCPConfiguration
        public let policy: ReconnectPolicy

        public func run() async throws {
            await cancelWhenGracefulShutdown {
                await peer.maintainConnection(host: host, port: port, configuration: configuration, policy: policy)
            }
        }
    }
}

import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// A configuration for tests: a shared secret, short timeouts, logs captured.
func testConfiguration(
    _ secret: PairingSecret, logs: LogCapture? = nil, tap: WireRecorder? = nil,
    _ adjust: (inout TCPConfiguration) -> Void = { _ in }
) -> TCPConfiguration {
    var configuration = TCPConfiguration(
        secret: secret, heartbeatInterval: .seconds(60), deadPeerTimeout: .seconds(120), handshakeTimeout: .seconds(10))
    if let logs { configuration.logger = logs.logger }
    if let tap { configuration.onWireBytes = tap.tap }
    adjust(&configuration)
    return configuration
}

/// Collects log lines (message, metadata and level) for assertions.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    private let (stream, continuation) = AsyncStream.makeStream(of: String.self)

    /// Every line as it is logged (for one waiter: `first(of:)`).
    var lineStream: AsyncStream<String> { stream }

    var logger: Logger {
        Logger(label: "test") { _ in Handler(capture: self) }
    }

    var all: [String] { lines.withLock { $0 } }

    func append(_ line: String) {
        lines.withLock { $0.append(line) }
        continuation.yield(line)
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            capture.append("\(event.level) \(event.message) \(merged)")
        }
    }
}

/// A bare TCP client that speaks raw bytes, for feeding a listener bad input.
struct RawSession {
    var iterator: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    var decoder = FrameDecoder()
    var received: [UInt8] = []
    let codec = FrameCodec()

    mutating func send(_ bytes: [UInt8]) async throws {
        try await outbound.write(ByteBuffer(bytes: bytes))
    }

    /// The next whole envelope from the peer; `nil` at end of stream.
    mutating func nextEnvelope() async throws -> Envelope? {
        while true {
            if let envelope = try decoder.nextEnvelope() { return envelope }
            guard let buffer = try await iterator.next() else { return nil }
            let bytes = Array(buffer.readableBytesView)
            received += bytes
            decoder.append(bytes)
        }
    }

    /// Reads until the peer closes; returns every byte received.
    mutating func readToEnd() async -> [UInt8] {
        do {
            while let buffer = try await iterator.next() {
                received += Array(buffer.readableBytesView)
            }
        } catch {}
        return received
    }

    /// Runs the dialer's handshake by hand; returns a sealer for the session.
    mutating func handshake(secret: PairingSecret) async throws -> FrameSealer {
        var dialer = DialerHandshake(secret: secret)
        try await send(codec.encode(dialer.start(), allowCompression: false))
        let envelope = try #require(try await nextEnvelope())
        guard case .sendAndEstablish(let proof, let keys) = dialer.receive(try codec.openEnvelope(envelope)) else {
            throw TransportError(.authenticationFailed, "raw handshake failed")
        }
        try await send(codec.encode(proof, allowCompression: false))
        return FrameSealer(key: keys.outbound, version: keys.version, codec: codec)
    }
}

/// Connects a raw client to `127.0.0.1:port` and runs `body` with it.
func withRawClient<Result: Sendable>(
    port: Int, _ body: (inout RawSession) async throws -> Result
) async throws -> Result {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try NIOAsyncChannel<ByteBuffer, ByteBuffer>(
                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
            }
        }
    return try await channel.executeThenClose { inbound, outbound in
        var session = RawSession(iterator: inbound.makeAsyncIterator(), outbound: outbound)
        return try await body(&session)
    }
}

/// Receives exactly `count` frames, or fewer if the stream ends; within `limit`.
func receive(_ count: Int, from connection: any FrameConnection, within limit: Duration = waitLimit,
             sourceLocation: SourceLocation = #_sourceLocation) async throws -> [Frame] {
    try await withDeadline("\(count) frames", within: limit, sourceLocation: sourceLocation) {
        var frames: [Frame] = []
        guard count > 0 else { return frames }
        for try await frame in connection.inbound {
            frames.append(frame)
            if frames.count == count { break }
        }
        return frames
    }
}

/// The error that ends `connection.inbound`, or `nil` if it finishes normally; the end must come within `limit`.
func inboundEnd(of connection: any FrameConnection, within limit: Duration = waitLimit,
                sourceLocation: SourceLocation = #_sourceLocation) async throws -> (frames: [Frame], error: TransportError?) {
    try await withDeadline("the connection's inbound frames to end", within: limit, sourceLocation: sourceLocation) {
        var frames: [Frame] = []
        do {
            for try await frame in connection.inbound { frames.append(frame) }
            return (frames, nil)
        } catch let error as TransportError {
            return (frames, error)
        } catch {
            Issue.record("inbound ended with a non-TransportError: \(error)")
            return (frames, nil)
        }
    }
}

/// The next connection `dialer` makes (nil when it is closed), within `limit`.
func nextConnection(of dialer: ReconnectingDialer, within limit: Duration = waitLimit,
                    sourceLocation: SourceLocation = #_sourceLocation) async throws -> (any FrameConnection)? {
    try await withDeadline("the dialer's next connection", within: limit, sourceLocation: sourceLocation) {
        for await connection in dialer { return connection }
        return nil
    }
}

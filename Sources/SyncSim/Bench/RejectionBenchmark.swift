import Foundation
@_spi(Benchmarks) import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// What a stranger costs the listener before it authenticated: the CPU time
/// (getrusage, whole process) per connection that sends a 4 KB compressed
/// hello (it would inflate to about 4 MB), against the machine's own limits
/// measured in the same run: one raw loopback connect + accept + close, and
/// one zlib inflate of the same 4 MB.
public struct RejectionBenchmark: Sendable {
    public var connections: Int
    public var inflateRuns: Int

    public init(quick: Bool) {
        connections = quick ? 20 : 300
        inflateRuns = quick ? 1 : 10
    }

    /// A handshake frame (type hello) whose compressed payload fits the
    /// 4096-byte pre-authentication limit and inflates to about 4 MB.
    static func compressedHello() throws -> (wire: [UInt8], inflated: Int) {
        var plain: [UInt8] = [1, 1] + [UInt8](repeating: 0x42, count: 32)
        plain += [UInt8](repeating: 0, count: 4_150_000)
        let deflated = try Compression.deflate(plain, level: 9)
        let envelope = Envelope(version: 1, type: TransportFrameType.hello, flags: .compressed, payload: deflated)
        return (try FrameCodec().encodeEnvelope(envelope), plain.count)
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        let (hello, inflatedSize) = try Self.compressedHello()
        progress("raw loopback connect + accept + close, \(connections) times")
        let rawSeconds = try RawLoopback.connectCloseCPUSeconds(count: connections)
        progress("raw zlib inflate of \(inflatedSize) bytes")
        let deflated = Array(hello[FrameEnvelope.headerSize...])
        let inflateBefore = BenchClock.processCPUSeconds()
        for _ in 0..<inflateRuns { _ = try Compression.zlibInflate(deflated, maxOutputSize: 8 << 20) }
        let inflateSeconds = (BenchClock.processCPUSeconds() - inflateBefore) / Double(inflateRuns)

        progress("\(connections) strangers each sending a \(hello.count)-byte compressed hello")
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: PairingSecret.generate()))
        let port = listener.port
        // Warm up (first connection pays for lazy set-up), then measure.
        try await RawLoopback.onThread { try RawLoopback.sendAndDrain(port: port, bytes: hello) }
        let before = BenchClock.processCPUSeconds()
        let count = connections
        try await RawLoopback.onThread {
            for _ in 0..<count { try RawLoopback.sendAndDrain(port: port, bytes: hello) }
        }
        let perConnection = (BenchClock.processCPUSeconds() - before) / Double(connections)
        await listener.close()

        let micro = perConnection * 1e6, rawMicro = rawSeconds * 1e6, inflateMicro = inflateSeconds * 1e6
        return [
            BenchFigure(name: "raw loopback connect+accept+close CPU", value: rawMicro, unit: "µs"),
            BenchFigure(name: "raw zlib inflate of 4 MB CPU", value: inflateMicro, unit: "µs"),
            BenchFigure(name: "pre-auth rejection CPU per connection (4 KB compressed hello)", value: micro, unit: "µs",
                        baseline: rawMicro, baselineName: "raw connect+close µs", ratio: micro / rawMicro, target: "≤ 20×"),
            BenchFigure(name: "pre-auth rejection CPU ÷ one 4 MB inflate", value: micro / inflateMicro, unit: "×",
                        baseline: inflateMicro, baselineName: "inflate µs", ratio: micro / inflateMicro, target: "≤ 0.1"),
        ]
    }
}

/// Plain blocking POSIX sockets on 127.0.0.1, run on a thread of their own
/// (never on the cooperative pool).
enum RawLoopback {
    /// Runs `body` on a new thread; returns when it finished.
    static func onThread(_ body: @escaping @Sendable () throws -> Void) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let thread = Thread {
                do {
                    try body()
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.start()
        }
    }

    static func address(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return address
    }

    static func connectTo(port: Int) throws -> Int32 {
        let fd = PortablePOSIX.streamSocket()
        guard fd >= 0 else { throw BenchError("socket() failed") }
        var target = address(port: UInt16(port))
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw BenchError("connect to 127.0.0.1:\(port) failed")
        }
        return fd
    }

    /// Reads until end of stream or a reset.
    static func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while read(fd, &buffer, buffer.count) > 0 {}
    }

    /// Connects, writes `bytes` (a reset by the peer is fine), half-closes,
    /// reads until the peer closes, closes.
    static func sendAndDrain(port: Int, bytes: [UInt8]) throws {
        let fd = try connectTo(port: port)
        defer { close(fd) }
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, PortablePOSIX.noSignalFlags) }
            if n <= 0 { break }
            sent += n
        }
        shutdown(fd, Int32(SHUT_WR))
        drain(fd)
    }

    /// CPU seconds (both ends, this process) of one connect + accept + close.
    static func connectCloseCPUSeconds(count: Int) throws -> Double {
        let listener = PortablePOSIX.streamSocket()
        guard listener >= 0 else { throw BenchError("socket() failed") }
        defer { close(listener) }
        var address = address(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                guard bind(listener, $0, length) == 0, listen(listener, 64) == 0, getsockname(listener, $0, &length) == 0 else {
                    throw BenchError("bind/listen failed")
                }
            }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let total = count + 1
        let server = Thread {
            for _ in 0..<total {
                let peer = accept(listener, nil, nil)
                guard peer >= 0 else { return }
                drain(peer)
                close(peer)
            }
        }
        server.start()
        try sendAndDrain(port: port, bytes: [])  // warm-up
        let before = BenchClock.processCPUSeconds()
        for _ in 0..<count { try sendAndDrain(port: port, bytes: []) }
        return (BenchClock.processCPUSeconds() - before) / Double(count)
    }
}

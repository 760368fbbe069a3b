import Foundation
import Synchronization
import TestSupport
import Testing
@testable import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// A listener that closes while connections are queued must never drop an
/// accepted channel unclosed (apple/swift-nio #2637: the process aborts with
/// "Deinited NIOAsyncWriter without calling finish()"). An abort kills the
/// test process, so this suite fails by crashing when the window is open.
@Suite(.timeLimit(.minutes(10))) struct TCPListenerCloseTests {
    let secret = PairingSecret.generate()

    /// Opens a blocking TCP connection to 127.0.0.1:port; `nil` if refused.
    static func rawConnect(port: Int) -> Int32? {
        let fd = PortablePOSIX.streamSocket()
        guard fd >= 0 else { return nil }
        // A blocking read on it gives up after 30 s: a listener that never
        // takes the connection (out of descriptors, say) cannot hang the test.
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// An authenticated connection nobody took from `connections` is closed
    /// with the listener: nothing else holds it. (It stayed open before, as
    /// long as its peer kept it alive.)
    @Test func closingClosesTheAuthenticatedConnectionsNobodyTook() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
        let client = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        // The listener's end finished its handshake too, and the connection waits in `connections`.
        _ = try await first(of: logs.lineStream, "the listener's end to authenticate") { $0.contains("connection authenticated") }
        try await withDeadline("the connection to wait in connections") {
            while listener.untakenConnections == 0 { await Task.yield() }
        }
        await listener.close()
        try await withDeadline("the dialer's connection to end") {
            do { for try await _ in client.inbound {} } catch {}
        }
        await client.close()
        var left = 0
        for await connection in listener.connections {
            left += 1
            await connection.close()
        }
        #expect(left == 0, "the finished stream still handed out \(left) connection(s)")
    }

    /// Authenticated connections nobody takes are bounded: past
    /// `maxUntakenConnections`, the next one is closed and reported.
    @Test func connectionsNobodyTakesAreBounded() async throws {
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(secret) { $0.maxUntakenConnections = 2 })
        var clients: [any FrameConnection] = []
        for _ in 0..<2 {
            clients.append(try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret)))
        }
        try await withDeadline("two connections to wait in connections") {
            while listener.untakenConnections < 2 { await Task.yield() }
        }
        let third = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let report = try await first(of: listener.rejectionReports, "the third connection's rejection")
        #expect(report.reason.code == .tooManyConnections, "\(report)")
        try await withDeadline("the third connection to be closed") {
            do { for try await _ in third.inbound {} } catch {}
        }
        #expect(listener.untakenConnections == 2)
        // Taking one makes room again.
        var taken = listener.connections.makeAsyncIterator()
        let first = try #require(await taken.next())
        #expect(listener.untakenConnections == 1)
        await first.close()
        await listener.close()
        for client in clients + [third] { await client.close() }
    }

    /// Connections that never finish their handshake are bounded: past
    /// `maxPendingHandshakes`, the next one is closed at once and reported.
    /// (Each stayed open until its handshake timed out, so strangers that
    /// connected fast enough held every descriptor of the process.)
    @Test func connectionsInTheirHandshakeAreBounded() async throws {
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret) {
                $0.maxPendingHandshakes = 2
                $0.handshakeTimeout = .seconds(600)
            })
        // Three strangers that connect and say nothing (the listener may take them in any order).
        var silent: [Int32] = []
        for _ in 0..<3 { silent.append(try #require(Self.rawConnect(port: listener.port))) }
        // One is closed long before the handshake timeout, and reported.
        let report = try await first(of: listener.rejectionReports, "a rejection of the connection past the limit") {
            $0.reason.code == .tooManyConnections
        }
        #expect(report.reason.message.contains("maxPendingHandshakes"), "\(report)")
        let ended = try await withDeadline("the listener to close the connection past the limit") { [silent] in
            while true {
                var byte: UInt8 = 0
                let closed = silent.filter { recv($0, &byte, 1, Int32(MSG_DONTWAIT)) == 0 }
                if !closed.isEmpty { return closed.count }
                await Task.yield()
            }
        }
        #expect(ended == 1)
        #expect(listener.pendingHandshakes == 2)
        // Once the silent ones are gone, a paired peer gets in.
        for fd in silent { close(fd) }
        try await withDeadline("the silent connections' handshakes to end") {
            while listener.pendingHandshakes > 0 { await Task.yield() }
        }
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "the paired peer's connection")
        try await dialer.send(Frame(type: 1, payload: [7]))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [7])])
        await dialer.close()
        await accepted.close()
        await listener.close()
    }

    @Test func closingWithQueuedConnectionsNeverDropsAChannel() async throws {
        let rounds = 300
        var accepted = 0
        var refused = 0
        for round in 0..<rounds {
            let listener = try await TCPListener.bind(
                host: "127.0.0.1", port: 0, configuration: testConfiguration(secret) { $0.handshakeTimeout = .seconds(5) })
            let port = listener.port
            // A few dialers that complete the handshake (or fail once the listener is gone).
            let dialers = (0..<2).map { _ in
                Task { [secret] in
                    try? await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: testConfiguration(secret))
                }
            }
            // A burst of raw connects: the kernel completes them before NIO accepts.
            var sockets: [Int32] = []
            for _ in 0..<(8 + round % 16) {
                if let fd = Self.rawConnect(port: port) { sockets.append(fd) }
            }
            // Vary the moment of the close against the accept loop.
            switch round % 4 {
            case 0: break
            case 1: await Task.yield()
            case 2: for _ in 0..<(round % 7) { await Task.yield() }
            default:
                _ = try await first(of: listener.connections, "an authenticated connection in round \(round)")
                accepted += 1
            }
            await listener.close()
            for fd in sockets { close(fd) }
            for dialer in dialers {
                if let connection = await dialer.value {
                    await connection.close()
                } else {
                    refused += 1
                }
            }
            // Everything the listener still owned is closed: its connections stream is finished.
            for await connection in listener.connections { await connection.close() }
        }
        print("listener close stress: \(rounds) rounds, \(accepted) accepted, \(refused) dials refused")
    }

    /// Before: a listener made with `init` and released without `run()` or
    /// `close()` (an app whose setup failed after it) kept its socket
    /// listening for the life of the process: its port stayed bound (a retry
    /// on a fixed port failed with "address in use"), one descriptor leaked
    /// per listener, and dialers were accepted by the kernel and never answered.
    @Test func aListenerReleasedWithoutRunOrCloseStopsListening() async throws {
        var port = 0
        do {
            let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
            port = listener.port
        }
        let dropped = port
        try await withDeadline("the released listener's port to refuse connections") {
            while let descriptor = Self.rawConnect(port: dropped) {
                close(descriptor)
                await Task.yield()
            }
        }
    }
}

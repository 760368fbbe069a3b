import Foundation
import Synchronization
@testable import SyncEngine
import SyncSim
import SyncTransport
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Connects to 127.0.0.1:port, sends `bytes`, half-closes, reads until the
/// peer closes, closes. Blocking POSIX calls: run it off the cooperative pool.
private func rawExchange(port: Int, bytes: [UInt8]) {
    let fd = PortablePOSIX.streamSocket()
    guard fd >= 0 else { return }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { return }
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, bytes.count, PortablePOSIX.noSignalFlags) }
    shutdown(fd, Int32(SHUT_WR))
    var buffer = [UInt8](repeating: 0, count: 1_024)
    while read(fd, &buffer, buffer.count) > 0 {}
}

/// Runs `body` on a thread of its own; returns when it finished.
private func onThread(_ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        Thread {
            body()
            continuation.resume()
        }.start()
    }
}

@Suite(.timeLimit(.minutes(5))) struct TransportEdgeTests {
    /// Two mis-paired devices (the TCP handshake succeeds, the session fails
    /// at once: two phones) must not redial in a tight loop:
    /// `maintainConnection` backs off although every dial succeeds. (Over TCP
    /// the session's pairing epoch is the authenticated pairing's, so a
    /// mismatch of configured epochs can no longer be set up this way.)
    @Test func misPairedPeerRedialsWithGrowingDelays() async throws {
        let pair = try Pair()
        let secret = PairingSecret.generate()
        let otherPhone = try SyncStore(path: pair.folder.file("phone-2.sqlite"), role: .phone, registry: TestKeys.registry(),
                                       options: StoreOptions(encryption: .keyFile(path: pair.folder.file("phone-2.key"))))
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let watch = SyncPeer(store: otherPhone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let configuration = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let client = Task {
            await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration,
                                           initialDelay: .milliseconds(10), maxDelay: .seconds(1))
        }
        // Without backoff: a dial every ~10 ms, well over 100 in 2 s. With it:
        // 10, 20, 40 … 640 ms, then 1 s: about 8 (jitter and load make it fewer).
        // The window opens at the first session (on a loaded machine the first
        // dial alone can take long); a slow machine only makes the count lower.
        var window: ContinuousClock.Instant?
        var sessions = 0
        var reasons: [String] = []
        for await connection in listener.connections {
            sessions += 1
            window = window ?? ContinuousClock.now + .seconds(2)
            reasons.append(await phone.run(over: connection))
            if let window, ContinuousClock.now >= window { break }
        }
        client.cancel()
        await listener.close()
        _ = await client.value
        print("mis-paired watch: \(sessions) sessions in 2 s")
        #expect(sessions >= 1)
        #expect(sessions <= 20, "\(sessions) sessions in 2 s: the mis-paired watch redials without backing off")
        #expect(reasons.allSatisfy { $0.contains("handshake-failed") || $0.contains("closed") }, "\(reasons.prefix(3))")
    }

    /// `syncsim bench transport --quick` works end to end (no timing assertions).
    @Test func rejectionBenchmarkQuickRun() async throws {
        let figures = try await RejectionBenchmark(quick: true).run()
        let row = try #require(figures.first { $0.name.hasPrefix("pre-auth rejection CPU per connection") })
        #expect(row.value > 0 && (row.baseline ?? 0) > 0 && row.ratio != nil)
        #expect(figures.contains { $0.name.hasPrefix("pre-auth rejection CPU ÷ one 4 MB inflate") })
    }

    /// A flood of strangers makes `syncsim node` write a bounded number of
    /// `rejected` events; the last ones carry how many were not reported.
    @Test func nodeRejectionEventsAreRateLimited() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"health:steps","availability":"all","policy":"automaticSmall","security":"none"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)
        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let listening = try await phone.next("the listening event") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)

        let strangers = 300
        let start = ContinuousClock.now
        await onThread {
            for _ in 0..<strangers { rawExchange(port: port, bytes: Array("GET / HTTP/1.1\r\n\r\n".utf8)) }
        }
        // Every rejection is accounted for: each event stands for itself and `suppressed` others.
        var events = 0
        var accounted = 0
        while accounted < strangers {
            let event = try await phone.next("a rejected event") { $0["event"] as? String == "rejected" }
            events += 1
            #expect(event["error"] as? String != nil)
            accounted += 1 + (event["suppressed"] as? Int ?? 0)
        }
        let seconds = Int((ContinuousClock.now - start) / .seconds(1))
        print("syncsim node: \(events) rejected events for \(accounted) strangers in \(seconds) s")
        #expect(accounted == strangers)
        // The default limit: 10 at once, then one a second.
        #expect(events <= 10 + seconds + 2, "\(events) rejected events for \(strangers) strangers in \(seconds) s")
    }
}

import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// How two peers get connected: the same test bodies run over both.
enum LinkKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case memory, tcp
    var description: String { rawValue }
}

/// Collects every byte seen on the wire, both directions.
final class WireTap: Sendable {
    private let bytes = Mutex<[UInt8]>([])
    func record(_ direction: WireDirection, _ chunk: [UInt8]) { bytes.withLock { $0 += chunk } }
    var all: [UInt8] { bytes.withLock { $0 } }
}

/// Runs a phone peer and a watch peer connected over `kind` while `body` runs.
func withConnectedPeers(_ pair: Pair, over kind: LinkKind, tap: WireTap? = nil,
                        configure: (inout ReplicationConfiguration) -> Void = { _ in },
                        _ body: (SyncPeer, SyncPeer) async throws -> Void) async throws {
    let secret = pair.pairing
    var config = ReplicationConfiguration(pairingEpoch: secret.epoch)
    configure(&config)
    let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
    let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
    switch kind {
    case .memory:
        let (a, b) = InMemoryConnection.makePair()
        let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        let outcome = await Result { try await body(phone, watch) }  // stop the peers also when the body failed
        await a.close()
        try await withDeadline("both peers to stop after the connection closed") { for task in tasks { _ = await task.value } }
        try outcome.get()
    case .tcp:
        var tcp = TCPConfiguration(secret: secret)
        if let tap { tcp.onWireBytes = { tap.record($0, $1) } }
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let configuration = tcp
        let server = Task { await phone.serve(listener) }
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        let outcome = await Result { try await body(phone, watch) }
        client.cancel()
        await listener.close()
        server.cancel()
        try await withDeadline("the server and the client to stop") { _ = await (server.value, client.value) }
        try outcome.get()
    }
}

@Suite(.timeLimit(.minutes(5))) struct TCPIntegrationTests {
    @Test(arguments: LinkKind.allCases)
    func twoWaySyncAndManualSync(over kind: LinkKind) async throws {
        let pair = try Pair()
        try await pair.phone.set(11, for: TestKeys.steps)
        try await pair.phone.set("Ada", for: TestKeys.name)  // manual
        try await pair.watch.set(["w"], for: TestKeys.tags)
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            try await eventually(pair.watch, "the phone's steps on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 11 }
            try await eventually(pair.phone, "the watch's tags on the phone") { try pair.phone.storedValue(for: TestKeys.tags) == ["w"] }
            try await phone.waitUntilIdle(timeout: waitLimit)
            #expect(try pair.watch.storedValue(for: TestKeys.name) == nil)
            try phone.sync()
            try await eventually(pair.watch, "the manually synced name on the watch") { try pair.watch.storedValue(for: TestKeys.name) == "Ada" }
            try await pair.watch.remove(TestKeys.steps)
            try await eventually(pair.phone, "the watch's delete on the phone") { try pair.phone.storedValue(for: TestKeys.steps) == nil }
            try await watch.waitUntilIdle(timeout: waitLimit)
        }
    }

    @Test(arguments: LinkKind.allCases)
    func largeValueOverTheLink(over kind: LinkKind) async throws {
        let pair = try Pair()
        let value = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try await pair.phone.set(value, for: TestKeys.blob)
        try await withConnectedPeers(pair, over: kind) { phone, _ in
            try phone.sync()
            try await eventually(pair.watch, "the large value on the watch") { try pair.watch.storedValue(for: TestKeys.blob) == value }
        }
    }

    @Test func trafficHoldsNoPlaintext() async throws {
        let pair = try Pair()
        let tap = WireTap()
        let marker = "PLAINTEXT-MARKER-\(UUID().uuidString)"
        try await pair.phone.set(marker, for: TestKeys.secret)
        try await pair.phone.set(marker, for: TestKeys.name)
        try await withConnectedPeers(pair, over: .tcp, tap: tap) { phone, _ in
            try phone.sync()
            try await eventually(pair.watch, "the name on the watch") { try pair.watch.storedValue(for: TestKeys.name) == marker }
        }
        let bytes = tap.all
        #expect(bytes.count > 200)
        #expect(!bytes.contains(subsequence: Array(marker.utf8)))
        #expect(!bytes.contains(subsequence: Array("profile:name".utf8)))
        #expect(!bytes.contains(subsequence: Array("health:daily:steps".utf8)))
    }

    @Test func wrongSecretGetsNothing() async throws {
        let pair = try Pair()
        try await pair.phone.set(5, for: TestKeys.steps)
        let phoneSecret = PairingSecret.generate()
        let strangerSecret = PairingSecret.generate()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: phoneSecret.epoch))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: phoneSecret))
        let server = Task { await phone.serve(listener) }
        await #expect(throws: TransportError.self) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: strangerSecret))
        }
        let rejection = try await first(of: listener.rejections, "the listener's rejection of the stranger")
        #expect(rejection.code == .authenticationFailed)
        await listener.close()
        server.cancel()
        try await withDeadline("the server to stop") { _ = await server.value }
        #expect(try pair.watch.allEntryInfo().isEmpty)
        #expect(pair.phone.syncCounters.entriesSent == 0)
    }

    @Test func phoneWithPhoneOverTCPIsRejected() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry([TestKeys.steps])
        let a = try SyncStore(path: folder.file("a"), role: .phone, registry: registry)
        let b = try SyncStore(path: folder.file("b"), role: .phone, registry: registry)
        try await a.set(1, for: TestKeys.steps)
        let secret = PairingSecret.generate()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
        let serverEvents = a.events()
        let dialerEvents = b.events()
        let server = Task { await SyncPeer(store: a, configuration: config).serve(listener) }
        let connection = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: secret))
        let reason = try await withDeadline("the dialing phone's session to end") { await SyncPeer(store: b, configuration: config).run(over: connection) }
        #expect(reason.contains("handshake-failed") || reason.contains("closed"), "\(reason)")
        // Whichever side validates the other's hello first refuses it and closes.
        let refused = try await withDeadline("an error event on either phone") {
            await withTaskGroup(of: Bool.self) { group in
                for events in [serverEvents, dialerEvents] {
                    group.addTask {
                        for await event in events {
                            if case .error(let error) = event { return error.code == .handshakeFailed }
                        }
                        return false
                    }
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
        }
        #expect(refused)
        await listener.close()
        server.cancel()
        try await withDeadline("the server to stop") { _ = await server.value }
        #expect(try b.storedValue(for: TestKeys.steps) == nil)
    }
}

import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// `serve` on a listener it served before. A cancelled `serve` finished the
/// listener's connections for good (an `AsyncStream` ends when its iterating
/// task is cancelled): a later `serve` of the listener returned at once while
/// the listener went on accepting, and its watches authenticated and then
/// waited for a session that never came.
@Suite(.timeLimit(.minutes(5))) struct ServeLifecycleTests {
    struct Peers {
        let phone: SyncPeer
        let watch: SyncPeer
        let tcp: TCPConfiguration
        let listener: TCPListener

        init(_ pair: Pair) async throws {
            let secret = PairingSecret.generate()
            let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
            phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
            watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
            tcp = TCPConfiguration(secret: secret)
            listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        }
    }

    @Test func aListenerServedAgainAfterACancelledServeServesItsWatches() async throws {
        let pair = try Pair()
        let peers = try await Peers(pair)
        let first = Task { await peers.phone.serve(peers.listener) }
        first.cancel()
        try await withDeadline("the cancelled serve to end") { await first.value }

        let second = Task { await peers.phone.serve(peers.listener) }
        let client = Task { await peers.watch.maintainConnection(host: "127.0.0.1", port: peers.listener.port, configuration: peers.tcp) }
        try await pair.watch.set(5, for: TestKeys.steps)
        let outcome = await Result {
            try await eventually(pair.phone, "the watch's write through the listener served again") {
                try pair.phone.storedValue(for: TestKeys.steps) == 5
            }
        }
        client.cancel()
        await peers.listener.close()
        try await withDeadline("serving and dialing to end") { _ = await (second.value, client.value) }
        try outcome.get()
    }
}

@testable import SyncEngine
import Synchronization
import SyncTransport
import Testing

/// An app that hears `.connected` finds the peer in `connectedPeers`. The
/// session loop published the event while it processed the peer's message,
/// and recorded the session as established only after it: for that moment
/// `connectedPeers` did not name the peer (3 of 13 runs of a renewal test).
@Suite(.timeLimit(.minutes(5))) struct ConnectedPeersTests {
    @Test func thePeerOfAConnectedEventIsAmongTheConnectedPeers() async throws {
        let pair = try Pair()
        let pairing = PairingSecret.generate()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                             tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secrets: [pairing]))
        let server = Task { await phone.serve(listener) }
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                             tickInterval: .milliseconds(50))
        let phoneEvents = pair.phone.events()
        let port = listener.port
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: pairing),
                                                      policy: ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(5))) }
        let outcome = await Result {
            // Each renewal of the watch's node id ends its session; the next one is met under the new id.
            let missing = Mutex<[UInt32]>([])
            for round in 0..<20 {
                let expected = round == 0 ? pair.watch.nodeID : try pair.watch.renewNodeID()
                // Looked at as the event is taken from the stream.
                try await first(of: phoneEvents, "the phone to meet the watch (round \(round))") { event in
                    guard case .connected(let node, _) = event, node == expected else { return false }
                    if !phone.connectedPeers.contains(node) { missing.withLock { $0.append(node) } }
                    return true
                }
            }
            let notListed = missing.withLock { $0 }
            #expect(notListed.isEmpty, "peers heard of as connected but not in connectedPeers: \(notListed)")
        }
        client.cancel()
        server.cancel()
        await listener.close()
        try await withDeadline("the watch and the phone to stop") {
            _ = await client.value
            _ = await server.value
        }
        try outcome.get()
    }
}

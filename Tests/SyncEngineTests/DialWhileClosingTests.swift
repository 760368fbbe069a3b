import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// Closing the store (or the dialer) while a dial is under way ends
/// `maintainConnection` at once: the dial went on until it connected or
/// failed (up to `handshakeTimeout`, 600 s in the test, against a phone that accepts the socket and
/// never answers its hello), and the loop returned only then.
@Suite(.timeLimit(.minutes(5))) struct DialWhileClosingTests {
    @Test func closingTheStoreEndsADialWaitingForItsHandshake() async throws {
        let pair = try Pair()
        let (silent, client) = try await Self.dialASilentPhone(from: pair)

        pair.watch.close()
        let ended = await Result {
            try await withDeadline("dialing to end once the store closed") { await client.value }
        }
        client.cancel()
        await silent.close()
        try ended.get()
    }

    /// The watch of `pair` keeps a connection up (`maintainConnection`) to a
    /// phone that accepts the socket and never answers (bound, not accepting
    /// yet; a handshake timeout of 600 s): returns once the watch's hello is
    /// written, with the listener and the dialing task.
    static func dialASilentPhone(from pair: Pair) async throws -> (silent: TCPListener, client: Task<Void, Never>) {
        let secret = PairingSecret.generate()
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let silent = try await TCPListener(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
        let (writes, wrote) = AsyncStream.makeStream(of: Void.self)
        var tcp = TCPConfiguration(secret: secret, handshakeTimeout: .seconds(600))
        tcp.onWireByteCount = { direction, _ in if direction == .outbound { wrote.yield() } }
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: silent.port, configuration: tcp) }
        try await first(of: writes, "the watch's hello")
        return (silent, client)
    }
}

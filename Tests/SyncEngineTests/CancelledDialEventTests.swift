import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// A reconnect loop that stops (graceful shutdown of `DialingService`, a
/// cancelled `maintainConnection`, a `syncsim node` quitting) while a dial
/// waits for its handshake reports no failure to reach the peer: the dial
/// was given up, the peer was not missing. It was an `.error` event, "cannot
/// reach the peer at …: the peer closed the connection during the
/// handshake", though this side had closed it.
@Suite(.timeLimit(.minutes(5))) struct CancelledDialEventTests {
    @Test func stoppingTheLoopDuringAHandshakeIsNoError() async throws {
        let pair = try Pair()
        let events = pair.watch.peerEvents()
        let (silent, client) = try await DialWhileClosingTests.dialASilentPhone(from: pair)

        client.cancel()
        let ended = await Result {
            try await withDeadline("dialing to end once cancelled") { await client.value }
        }
        await silent.close()
        try ended.get()
        pair.watch.close()  // the events end here
        var errors: [String] = []
        for await record in events {
            if case .error(let error) = record.event { errors.append(error.description) }
        }
        #expect(errors.isEmpty, "\(errors)")
    }
}

import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// Two `serve` calls on one listener at once: the second one's wait for a
/// connection replaced the first's (the listener's queue had room for one
/// waiting task), which then never returned, not when cancelled, nor when the
/// listener closed or the store closed.
@Suite(.timeLimit(.minutes(5))) struct ServeTwiceTests {
    @Test func twoServesOfOneListenerEachEnd() async throws {
        let pair = try Pair()
        let peers = try await ServeLifecycleTests.Peers(pair)
        let firstServe = Task { await peers.phone.serve(peers.listener) }
        try await first(of: peers.listener.takerWaits, "the first serve to wait for a connection") { $0 >= 1 }
        let secondServe = Task { await peers.phone.serve(peers.listener) }
        try await first(of: peers.listener.takerWaits, "both serves to wait for a connection") { $0 >= 2 }
        // Each serve runs the sessions of the connections it takes.
        let client = Task { await peers.watch.maintainConnection(host: "127.0.0.1", port: peers.listener.port, configuration: peers.tcp) }
        try await pair.watch.set(5, for: TestKeys.steps)
        try await eventually(pair.phone, "the watch's write") { try pair.phone.storedValue(for: TestKeys.steps) == 5 }
        client.cancel()
        _ = await client.value

        firstServe.cancel()
        let firstEnded = await Result { try await withDeadline("the first serve to end when cancelled") { await firstServe.value } }
        await peers.listener.close()
        let secondEnded = await Result { try await withDeadline("the second serve to end with the listener") { await secondServe.value } }
        try firstEnded.get()
        try secondEnded.get()
    }
}

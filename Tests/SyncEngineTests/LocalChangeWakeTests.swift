import Foundation
import Synchronization
@testable import SyncEngine
import Testing

/// What wakes a session loop: every commit names the peer it came from, and a
/// session is not woken by what it applied from its own peer (it sends what
/// follows a received frame itself), only by this device's commits and other peers'.
@Suite struct LocalChangeWakeTests {
    @Test func commitsNameTheirOrigin() throws {
        let pair = try Pair()
        let origins = Mutex<[UInt32]>([])
        let observation = pair.watch.localWrites.observe(where: { _ in true }) { origin in origins.withLock { $0.append(origin) } }
        defer { observation.cancel() }
        let configuration = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: pair.phone, configuration: configuration)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
        establish(phone, watch)
        try pair.phone.setNow(7, for: TestKeys.daily["a"])
        settle(phone, watch, toWatch: phone.pump(now: 0))
        #expect(try pair.watch.value(for: TestKeys.daily["a"]) == 7)
        // The applied batch names the phone; the watch's own write names this device.
        try pair.watch.setNow(8, for: TestKeys.daily["b"])
        #expect(origins.withLock { $0 } == [pair.phone.nodeID, SyncStore.thisDevice])
    }

    @Test func aSessionIgnoresWhatItAppliedFromItsOwnPeer() {
        let signal = LocalChangeSignal()
        #expect(signal.concerns(origin: SyncStore.thisDevice))
        #expect(signal.concerns(origin: 0x1234))  // the peer is not known yet
        signal.sessionPeer = 0x1234
        #expect(!signal.concerns(origin: 0x1234))
        #expect(signal.concerns(origin: 0x5678))  // another watch's changes are for this session's peer
        #expect(signal.concerns(origin: SyncStore.thisDevice))
        // One wake-up at a time until the loop takes it.
        #expect(signal.raise())
        #expect(!signal.raise())
        signal.lower()
        #expect(signal.raise())
    }
}

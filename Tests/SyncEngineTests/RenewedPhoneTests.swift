import Foundation
@testable import SyncEngine
import Testing

/// A phone that took a new node id (`renewNodeID()`, or restored with
/// `renewsNodeIDWhenRestored`) is met by its watch as a new peer; the watch
/// keeps a cursor for the old node id (a watch never forgets its phone). That
/// old cursor never moves again: it must not keep the watch's changes pending,
/// `peerHas` false, or the watch's tombstones unpurged, for ever.
@Suite(.timeLimit(.minutes(2))) struct RenewedPhoneTests {
    @Test func aWatchWhosePhoneTookANewNodeIDWaitsOnlyForTheNewOne() async throws {
        let pair = try Pair { $0.tombstoneRetention = .seconds(60) }
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        try await pair.watch.set(5, for: TestKeys.daily["doomed"])
        CopiedStoreTests.session(pair.phone, pair.watch, epoch: "pairing")
        let old = pair.phone.nodeID
        pair.watchClock.advance(by: 1_000)
        pair.phoneClock.advance(by: 1_000)
        let renewed = try pair.phone.renewNodeID()
        #expect(renewed != old)
        try await pair.watch.set(2, for: TestKeys.daily["b"])
        try await pair.watch.remove(TestKeys.daily["doomed"])
        CopiedStoreTests.session(pair.phone, pair.watch, epoch: "pairing")
        #expect(try pair.phone.storedValue(for: TestKeys.daily["b"]) == 2)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["doomed"]) == nil)
        #expect(Set(try pair.watch.knownPeers()) == [old, renewed])  // the old one is kept

        let version = try #require(try pair.watch.entryInfo(forKey: TestKeys.daily["b"].name)?.version)
        #expect(try pair.watch.peerHas(key: TestKeys.daily["b"].name, atLeast: version))
        #expect(try pair.watch.pendingSummary().automatic == 0)
        #expect(try pair.watch.entryInfo(forKey: TestKeys.daily["b"].name)?.isPending == false)

        // The delete reached the phone: past the retention the watch purges its tombstone.
        pair.watchClock.advance(by: 61_000)
        _ = try pair.watch.purgeTombstones()
        pair.watchClock.advance(by: 61_000)
        _ = try pair.watch.purgeTombstones()
        #expect(try pair.watch.entryInfo(forKey: TestKeys.daily["doomed"].name) == nil, "the tombstone waits for the phone's old node id")
    }
}

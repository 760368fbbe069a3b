@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A device whose wall clock ran far ahead (set by hand to a wrong year,
/// a broken RTC) and is then set right: what it wrote meanwhile was refused
/// by its peer (`StoreOptions.maxRemoteClockAhead`), and what it writes after
/// the correction must reach the peer again.
@Suite(.timeLimit(.minutes(5))) struct LocalClockCorrectionTests {
    static let twoYears: Int64 = 2 * 365 * 24 * 3_600_000

    /// The phone writes while its clock reads two years ahead: the watch refuses it.
    private static func writeWithClockAhead(_ pair: Pair, keys: [String]) async throws {
        pair.phoneClock.setSkew(twoYears)
        for key in keys { try await pair.phone.set(1, for: TestKeys.daily[key]) }
        Link(pair.phone, pair.watch).connect()
        #expect(pair.watch.syncCounters.versionsRefused == keys.count)
        for key in keys { #expect(try await pair.watch.get(TestKeys.daily[key]) == 0) }
        pair.phoneClock.setSkew(0)
    }

    /// After a restart the clock no longer follows the far-future row (it is
    /// beyond the bound), so the key's next write got a version below the
    /// version it replaced, and carried that one as its base: the watch
    /// refused it as `base after version`, for good.
    @Test func aWriteOverARowWrittenWithTheClockAheadReachesThePeerAfterARestart() async throws {
        var pair = try Pair()
        try await Self.writeWithClockAhead(pair, keys: ["a"])
        try pair.reopen(.phone)
        try await pair.phone.set(2, for: TestKeys.daily["a"])
        let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.daily["a"].name))
        #expect(info.version.physicalMilliseconds == pair.phoneClock.nowMilliseconds())
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.daily["a"]) == 2)
        #expect(pair.watch.syncCounters.versionsRefused == 1)
        // And the two keep agreeing: the watch's later write comes back.
        pair.watchClock.advance(by: 10)
        try await pair.watch.set(3, for: TestKeys.daily["a"])
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.phone.get(TestKeys.daily["a"]) == 3)
    }

    /// A row a store already holds with a base after its version (written by
    /// a build before the fix) is sent with a base the peer accepts.
    @Test func aStoredRowWhoseBaseIsAfterItsVersionIsStillAccepted() async throws {
        let pair = try Pair()
        try await pair.phone.set(4, for: TestKeys.steps)
        let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.steps.name))
        try rawSQL(pair.folder.file("phone.sqlite"),
                   "UPDATE entries SET base_ver = \(info.version.packed + (1 << 40)), base_node = 7 WHERE key = '\(TestKeys.steps.name)'")
        Link(pair.phone, pair.watch).connect()
        #expect(pair.watch.syncCounters.versionsRefused == 0)
        #expect(try await pair.watch.get(TestKeys.steps) == 4)
    }

    /// Without a restart the clock kept the far-future time it had issued:
    /// every later write of the phone, to any key, carried it and was refused
    /// by the watch until the app restarted. The clock now drops what is past
    /// the bound, as a restart does.
    @Test func writesAfterTheClockIsSetRightReachThePeerWithoutARestart() async throws {
        let pair = try Pair()
        try await Self.writeWithClockAhead(pair, keys: ["a"])
        try await pair.phone.set(5, for: TestKeys.daily["b"])
        try await pair.phone.set(6, for: TestKeys.daily["a"])
        for key in ["a", "b"] {
            let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.daily[key].name))
            #expect(info.version.physicalMilliseconds == pair.phoneClock.nowMilliseconds())
        }
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.daily["b"]) == 5)
        #expect(try await pair.watch.get(TestKeys.daily["a"]) == 6)
        #expect(pair.watch.syncCounters.versionsRefused == 1)
    }

    /// A key written while the clock ran ahead, and not written again: once
    /// the clock is set right (the next write finds it so), the store writes
    /// it again with a version the watch accepts, and it arrives. Before, the
    /// watch never got it: the phone kept the refused version for good.
    @Test func aKeyWrittenWithTheClockAheadGoesOutOnceTheClockIsSetRight() async throws {
        let pair = try Pair()
        try await pair.phone.set(3, for: TestKeys.daily["g"])
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.daily["g"]) == 3)
        // A value and a removal made while the clock ran ahead: the watch refuses both.
        pair.phoneClock.setSkew(Self.twoYears)
        try await pair.phone.set(1, for: TestKeys.daily["e"])
        try await pair.phone.remove(TestKeys.daily["g"])
        Link(pair.phone, pair.watch).connect()
        #expect(pair.watch.syncCounters.versionsRefused == 2)
        #expect(try await pair.watch.get(TestKeys.daily["e"]) == 0)
        #expect(try await pair.watch.get(TestKeys.daily["g"]) == 3)
        pair.phoneClock.setSkew(0)
        // Another key's write finds the clock set right; the store's queue then writes e again.
        try await pair.phone.set(5, for: TestKeys.steps)
        _ = try await pair.phone.performBlocking {}
        let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.daily["e"].name))
        #expect(info.version.physicalMilliseconds <= pair.phoneClock.nowMilliseconds())
        #expect(try await pair.phone.get(TestKeys.daily["e"]) == 1)
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.daily["e"]) == 1)
        #expect(try await pair.watch.get(TestKeys.steps) == 5)
        #expect(try await pair.watch.get(TestKeys.daily["g"]) == 0, "the removal made with the clock ahead")
        #expect(pair.watch.syncCounters.versionsRefused == 2, "only the first refusals: what went again was taken")
    }

    /// The same when the app writes nothing after the correction: a live
    /// session's tick finds the clock set right.
    @Test func aKeyWrittenWithTheClockAheadGoesOutOverASessionWithoutAnotherWrite() async throws {
        let pair = try Pair()
        pair.phoneClock.setSkew(Self.twoYears)
        try await pair.phone.set(1, for: TestKeys.daily["h"])
        pair.phoneClock.setSkew(0)
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let (a, b) = InMemoryConnection.makePair()
        let running = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        try await eventually(pair.watch, "h on the watch") { try pair.watch.storedValue(for: TestKeys.daily["h"]) == 1 }
        await a.close()
        for task in running { _ = await task.value }
    }

    /// The same through the mailbox alone: a queued round finds the clock
    /// set right and posts the key again, written with a version the watch takes.
    @Test func aKeyWrittenWithTheClockAheadGoesOutThroughTheMailboxWithoutAnotherWrite() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        pair.phoneClock.setSkew(Self.twoYears)
        try await pair.phone.set(1, for: TestKeys.daily["k"])
        _ = try phone.deliverQueued(through: phoneBox)
        _ = try watch.deliverQueued(through: watchBox)
        #expect(pair.watch.syncCounters.versionsRefused == 1)
        pair.phoneClock.setSkew(0)
        for _ in 0..<2 {
            _ = try phone.deliverQueued(through: phoneBox)
            _ = try watch.deliverQueued(through: watchBox)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.daily["k"]) == 1)
        #expect(pair.watch.syncCounters.versionsRefused == 1)
    }

    /// The same across a restart: a store that opens with rows it wrote past
    /// the bound writes them again.
    @Test func aKeyWrittenWithTheClockAheadGoesOutAfterARestart() async throws {
        var pair = try Pair()
        try await Self.writeWithClockAhead(pair, keys: ["f"])
        try pair.reopen(.phone)
        let info = try #require(try pair.phone.entryInfo(forKey: TestKeys.daily["f"].name))
        #expect(info.version.physicalMilliseconds == pair.phoneClock.nowMilliseconds())
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.daily["f"]) == 1)
        #expect(pair.watch.syncCounters.versionsRefused == 1)
        // Once is enough: the next open writes nothing.
        let written = info.version
        try pair.reopen(.phone)
        #expect(try pair.phone.entryInfo(forKey: TestKeys.daily["f"].name)?.version == written)
    }

    /// A clock that drifted ahead in steps, each under the bound, then set
    /// right: it stops following the time past the bound, and may go on from
    /// below a version it issued within it. A write over that version still
    /// orders after it (the watch took that one), or the watch would keep it
    /// and send it back over the phone's later write.
    @Test func aWriteOrdersAfterTheVersionItReplacesWhenTheClockStopsFollowingItsTime() async throws {
        let pair = try Pair()
        pair.phoneClock.setSkew(50 * 60_000)
        try await pair.phone.set(1, for: TestKeys.steps)
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.steps) == 1)
        pair.phoneClock.setSkew(100 * 60_000)
        try await pair.phone.set(1, for: TestKeys.daily["x"])
        pair.phoneClock.setSkew(0)
        let replaced = try #require(try pair.phone.entryInfo(forKey: TestKeys.steps.name)).version
        try await pair.phone.set(2, for: TestKeys.steps)
        #expect(try #require(try pair.phone.entryInfo(forKey: TestKeys.steps.name)).version > replaced)
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.steps) == 2)
        #expect(try await pair.phone.get(TestKeys.steps) == 2)
    }

    /// What the clock observed from the peer (within the bound) is kept when
    /// it drops its own far-future time: a later local write still orders
    /// after the peer's write it saw.
    @Test func droppingTheFarFutureTimeKeepsWhatWasObservedFromThePeer() throws {
        let wall = ManualClock(now: 1_000_000_000)
        let clock = HybridLogicalClock(node: 1, physical: wall, maxAhead: .seconds(3600))
        wall.setSkew(Self.twoYears)
        let ahead = try clock.now()
        wall.setSkew(0)
        let peer = HLCTimestamp(physicalMilliseconds: wall.nowMilliseconds() + 600_000, counter: 3, node: 2)
        clock.observe(peer)
        let next = try clock.now()
        #expect(next > peer)
        #expect(next < ahead)
        #expect(next.physicalMilliseconds == peer.physicalMilliseconds)
        // Within the bound nothing changes: the clock goes on from the latest it issued.
        wall.advance(by: -1_800_000)
        #expect(try clock.now() > next)
        // Reserving drops it the same way.
        wall.setSkew(Self.twoYears)
        _ = try clock.reserve(3)
        wall.setSkew(0)
        let first = try clock.reserve(2)
        #expect(first > next.packed)
        #expect(HLCTimestamp(packed: first, node: 1).physicalMilliseconds < wall.nowMilliseconds() + 3_600_000)
    }

    /// A key the phone wrote while its clock ran ahead (the watch refused
    /// it) and does not write again: the watch's later write of it lost to
    /// the phone's far-future version on the phone, and the phone's went
    /// back to the watch, refused again; the two kept different values for
    /// good. A stored version past the bound now gives way to one within it.
    @Test func thePeersWriteReplacesARowWrittenWithTheClockAhead() async throws {
        var pair = try Pair()
        try await Self.writeWithClockAhead(pair, keys: ["c"])
        try await pair.watch.set(7, for: TestKeys.daily["c"])
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.phone.get(TestKeys.daily["c"]) == 7)
        #expect(try await pair.watch.get(TestKeys.daily["c"]) == 7)
        // After a restart of the phone too.
        pair.phoneClock.setSkew(Self.twoYears)
        try await pair.phone.set(1, for: TestKeys.daily["d"])
        pair.phoneClock.setSkew(0)
        try pair.reopen(.phone)
        pair.watchClock.advance(by: 10)
        try await pair.watch.set(8, for: TestKeys.daily["d"])
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.phone.get(TestKeys.daily["d"]) == 8)
        #expect(try await pair.watch.get(TestKeys.daily["d"]) == 8)
    }

    /// A store told to accept any time ahead (`.seconds(.max)`) took a
    /// peer's version at the largest one; its clock then could issue no
    /// later version, and every local write failed, after a restart too.
    /// Ten years ahead at most count now.
    @Test func aStoreAcceptingAnyTimeAheadIsNotWedgedByThePeersLargestVersion() async throws {
        let folder = TempFolder()
        var options = StoreOptions(clock: ManualClock())
        options.maxRemoteClockAhead = .seconds(Int64.max)
        let registry = try KeyRegistry([TestKeys.steps, TestKeys.daily])
        let path = folder.file("watch.sqlite")
        var store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        let largest = WireEntry(key: TestKeys.steps.name, version: HLCTimestamp(packed: HLCTimestamp.maxPacked, node: 9), base: .zero,
                                deleted: false, encoding: "json", value: Array("5".utf8))
        let nineYears = WireEntry(key: TestKeys.daily["n"].name, version: HLCTimestamp(physicalMilliseconds: options.clock.nowMilliseconds() + 9 * 365 * 86_400_000,
                                                                                      counter: 0, node: 9),
                                  base: .zero, deleted: false, encoding: "json", value: Array("6".utf8))
        let result = try store.applyRemote([largest, nineYears], peerRole: .phone, mismatched: [])
        #expect(result.versionRefusals.map(\.key) == [TestKeys.steps.name])
        try await store.set(3, for: TestKeys.daily["a"])
        store.close()
        store = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        defer { store.close() }
        try await store.set(4, for: TestKeys.daily["a"])
        #expect(try await store.get(TestKeys.daily["a"]) == 4)
        #expect(try await store.get(TestKeys.daily["n"]) == 6)
    }
}

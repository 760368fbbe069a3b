@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A device whose wall clock ran far ahead (set by hand to a wrong year,
/// a broken RTC) and is then set right: what it wrote meanwhile was refused
/// by its peer (`StoreOptions.maxRemoteClockAhead`), and what it writes after
/// the correction must reach the peer again.
@Suite(.timeLimit(.minutes(5))) struct LocalClockCorrectionTests {
    static let twoYears: Int64 = 2 * 365 * 24 * 3_600_000

    private static func reopenPhone(_ pair: inout Pair) throws {
        pair.phone.close()
        pair.phone = try SyncStore(path: pair.folder.file("phone.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                   options: StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key"))))
    }

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
        try Self.reopenPhone(&pair)
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
}

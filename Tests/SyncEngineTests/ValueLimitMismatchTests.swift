import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// `StoreOptions.maxValueSize` is each device's own: it is not exchanged when
/// the devices meet. A value between the two limits, written on the side with
/// the larger one, is refused by the other, live and queued: the receiver
/// reports it (`.error`, `value-too-large`, naming the key), the sender reports
/// the refusal in the acknowledgement (`.error` naming key and code), nothing is
/// sent again, later changes of other keys are not held up, both stores keep
/// what they hold, and a later write of the key on the smaller side syncs.
@Suite(.timeLimit(.minutes(5))) struct ValueLimitMismatchTests {
    static let smallLimit = 1_000
    static let between = Data(repeating: 7, count: 5_000)

    /// A pair whose `smaller` store takes values of at most `smallLimit` bytes (the other the default 64 MiB).
    static func pair(smaller: DeviceRole) throws -> Pair {
        var pair = try Pair()
        let name = smaller == .watch ? "watch" : "phone"
        var options = StoreOptions(clock: smaller == .watch ? pair.watchClock : pair.phoneClock,
                                   encryption: .keyFile(path: pair.folder.file("\(name).key")))
        options.maxValueSize = smallLimit
        let path = pair.folder.file("\(name).sqlite")
        if smaller == .watch {
            pair.watch.close()
            pair.watch = try SyncStore(path: path, role: .watch, registry: try TestKeys.registry(), options: options)
        } else {
            pair.phone.close()
            pair.phone = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        }
        return pair
    }

    /// The `.error` events among `events` whose message holds `text`.
    static func errors(_ events: [SyncEvent], containing text: String) -> [SyncError] {
        events.compactMap { event -> SyncError? in
            if case .error(let error) = event, error.message.contains(text) { return error }
            return nil
        }
    }

    @Test(arguments: [DeviceRole.watch, .phone])
    func aValueBetweenTheLimitsIsRefusedOnceAndReportedOnBothSidesLive(smaller: DeviceRole) async throws {
        let pair = try Self.pair(smaller: smaller)
        let (large, small) = smaller == .watch ? (pair.phone, pair.watch) : (pair.watch, pair.phone)
        let (largeClock, smallClock) = smaller == .watch ? (pair.phoneClock, pair.watchClock) : (pair.watchClock, pair.phoneClock)
        let largeEvents = large.events(), smallEvents = small.events()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let (largeEnd, smallEnd) = smaller == .watch ? (link.a, link.b) : (link.b, link.a)
        try await large.set(Self.between, for: TestKeys.blob)
        largeClock.advance(by: 1)
        try await large.set(42, for: TestKeys.steps)   // a later change of another key
        link.settle()
        #expect(try small.storedValue(for: TestKeys.steps) == 42, "the refused value holds nothing up")
        #expect(try small.storedValue(for: TestKeys.blob) == nil)
        #expect(try large.storedValue(for: TestKeys.blob) == Self.between, "the sender keeps its value")
        #expect(small.syncCounters.entriesRejected == 1)
        // Nothing goes again: the link is quiet and both ends idle.
        let sentBefore = link.entryKeys
        #expect(sentBefore.filter { $0 == TestKeys.blob.name }.count == 1, "\(sentBefore)")
        link.now += 60_000
        link.settle()
        #expect(link.entryKeys == sentBefore, "the refused value was sent again")
        #expect(largeEnd.isIdle, "\(largeEnd.idleBlockers)")
        #expect(smallEnd.isIdle, "\(smallEnd.idleBlockers)")
        // A later write of the key on the smaller side syncs to the larger one.
        smallClock.advance(by: 10_000)
        try await small.set(Data([1, 2, 3]), for: TestKeys.blob)
        link.settle()
        #expect(try large.storedValue(for: TestKeys.blob) == Data([1, 2, 3]))
        pair.phone.close()
        pair.watch.close()
        let sent = try await all(of: largeEvents, "the larger side's events")
        let received = try await all(of: smallEvents, "the smaller side's events")
        #expect(Self.errors(sent, containing: "value-too-large").count == 1, "the sender hears of the refusal once")
        let refusals = Self.errors(received, containing: TestKeys.blob.name)
        #expect(refusals.map(\.code) == [.valueTooLarge], "the receiver reports the value it refused: \(received)")
    }

    /// A value over the automatic limit goes in chunks with `sync()`; the
    /// receiver refuses it from its first chunk, and says so.
    @Test func aChunkedValueOverTheReceiversLimitIsRefusedWithAnEvent() async throws {
        let pair = try Pair()
        var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch2.key")))
        options.maxValueSize = 150_000
        let watch = try SyncStore(path: pair.folder.file("watch2.sqlite"), role: .watch, registry: try TestKeys.registry(), options: options)
        let watchEvents = watch.events()
        let link = Link(pair.phone, watch)
        link.connect()
        let big = Data(repeating: 9, count: 200_000)
        try await pair.phone.set(big, for: TestKeys.blob)   // over 100 KB: deferred until sync()
        _ = try pair.phone.requestManualSync()
        try await pair.phone.set(5, for: TestKeys.steps)
        link.settle()
        #expect(try watch.storedValue(for: TestKeys.steps) == 5)
        #expect(try watch.storedValue(for: TestKeys.blob) == nil)
        #expect(try pair.phone.storedValue(for: TestKeys.blob) == big)
        #expect(watch.syncCounters.entriesRejected == 1, "one value refused, counted once")
        let sentBefore = link.entryKeys
        #expect(sentBefore.filter { $0 == TestKeys.blob.name }.count >= 1, "\(sentBefore)")
        link.now += 60_000
        link.settle()
        #expect(link.entryKeys == sentBefore, "the refused value was sent again")
        #expect(link.a.isIdle && link.b.isIdle)
        watch.close()
        let received = try await all(of: watchEvents, "the watch's events")
        #expect(Self.errors(received, containing: TestKeys.blob.name).map(\.code) == [.valueTooLarge], "\(received)")
    }

    @Test(arguments: [DeviceRole.watch, .phone])
    func aValueBetweenTheLimitsIsRefusedOnceAndReportedOnBothSidesQueued(smaller: DeviceRole) async throws {
        let pair = try Self.pair(smaller: smaller)
        let folder = TempFolder()
        let queued = QueuedDeliveryTests()
        let (phone, phoneBox, watch, watchBox) = try queued.peers(pair, directory: folder.path)
        let (large, small) = smaller == .watch ? (pair.phone, pair.watch) : (pair.watch, pair.phone)
        let (largePeer, largeBox, smallPeer, smallBox) = smaller == .watch ? (phone, phoneBox, watch, watchBox) : (watch, watchBox, phone, phoneBox)
        let smallClock = smaller == .watch ? pair.watchClock : pair.phoneClock
        let largeEvents = large.events(), smallEvents = small.events()
        try await large.set(Self.between, for: TestKeys.blob)
        try await large.set(42, for: TestKeys.steps)
        _ = try largePeer.deliverQueued(through: largeBox)
        _ = try smallPeer.deliverQueued(through: smallBox)
        _ = try largePeer.deliverQueued(through: largeBox)
        #expect(try small.storedValue(for: TestKeys.steps) == 42, "the refused value holds nothing up")
        #expect(try small.storedValue(for: TestKeys.blob) == nil)
        #expect(try large.storedValue(for: TestKeys.blob) == Self.between)
        // Rounds after it post nothing again.
        for _ in 0..<3 {
            let a = try largePeer.deliverQueued(through: largeBox)
            let b = try smallPeer.deliverQueued(through: smallBox)
            #expect(a.entriesPosted == 0 && b.entriesPosted == 0, "posted again: \(a) \(b)")
        }
        smallClock.advance(by: 10_000)
        try await small.set(Data([1, 2, 3]), for: TestKeys.blob)
        _ = try smallPeer.deliverQueued(through: smallBox)
        _ = try largePeer.deliverQueued(through: largeBox)
        #expect(try large.storedValue(for: TestKeys.blob) == Data([1, 2, 3]))
        pair.phone.close()
        pair.watch.close()
        let sent = try await all(of: largeEvents, "the larger side's events")
        let received = try await all(of: smallEvents, "the smaller side's events")
        #expect(Self.errors(sent, containing: "value-too-large").count == 1, "\(sent)")
        #expect(Self.errors(received, containing: TestKeys.blob.name).map(\.code) == [.valueTooLarge], "\(received)")
    }

    /// A store reopened with a smaller limit keeps the values it holds over
    /// it: they read as before and a later write of the key syncs.
    @Test func aLimitThatShrinksAfterARestartKeepsTheValuesHeld() async throws {
        var pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        try await pair.phone.set(Self.between, for: TestKeys.blob)
        link.settle()
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.between)
        pair.watch.close()
        var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
        options.maxValueSize = Self.smallLimit
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(), options: options)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.between, "a value held stays readable")
        let events = pair.phone.events()
        let again = Link(pair.phone, pair.watch)
        again.connect()
        again.settle()
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.between)
        pair.watchClock.advance(by: 10_000)
        try await pair.watch.set(Data([4]), for: TestKeys.blob)
        again.settle()
        #expect(try pair.phone.storedValue(for: TestKeys.blob) == Data([4]))
        #expect(again.a.isIdle && again.b.isIdle)
        pair.phone.close()
        pair.watch.close()
        let phoneEvents = try await all(of: events, "the phone's events")
        #expect(Self.errors(phoneEvents, containing: "value-too-large").isEmpty, "\(phoneEvents)")
    }
    /// A value held from before the limit shrank that comes again (a
    /// duplicated delivery, a re-baseline) is what the store holds: it is
    /// ignored, not refused as too large (no error on either side).
    @Test func aValueHeldFromBeforeTheLimitShrankIsNotRefusedWhenItComesAgain() async throws {
        var pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        try await pair.phone.set(Self.between, for: TestKeys.blob)
        link.settle()
        let carrying = try #require(link.frames.first { (sent: (from: String, frame: Frame)) -> Bool in
            guard sent.from == "a", let batch = (try? SyncMessage(frame: sent.frame))?.asBatch else { return false }
            return batch.entries.contains { $0.key == TestKeys.blob.name }
        }).frame
        pair.watch.close()
        var options = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
        options.maxValueSize = Self.smallLimit
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(), options: options)
        let watchEvents = pair.watch.events()
        let again = Link(pair.phone, pair.watch)
        again.connect()
        let replies: [SyncMessage] = again.b.receive(carrying, now: again.now).compactMap { try? SyncMessage(frame: $0) }
        let ack = try #require(replies.compactMap { $0.asAck }.first)
        #expect(ack.rejected.isEmpty, "\(ack.rejected)")
        #expect(pair.watch.syncCounters.entriesRejected == 0)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == Self.between)
        pair.phone.close()
        pair.watch.close()
        let events = try await all(of: watchEvents, "the watch's events")
        #expect(Self.errors(events, containing: TestKeys.blob.name).isEmpty, "\(events)")
    }
    /// Over running peers (TCP on 127.0.0.1, and the in-memory link) the
    /// refused value keeps neither side from going idle.
    @Test(arguments: LinkKind.allCases)
    func runningPeersGoIdleAfterTheRefusal(over kind: LinkKind) async throws {
        let pair = try Self.pair(smaller: .watch)
        let phoneEvents = pair.phone.events(), watchEvents = pair.watch.events()
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            try await phone.waitUntilIdle(timeout: .seconds(30))
            let seen = pair.watch.changes(for: TestKeys.steps)
            try await pair.phone.set(Self.between, for: TestKeys.blob)
            try await pair.phone.set(42, for: TestKeys.steps)
            _ = try await first(of: seen, "the watch to see the later change")
            _ = try await first(of: watchEvents, "the watch's refusal") { event in
                if case .error(let error) = event { error.code == .valueTooLarge } else { false }
            }
            _ = try await first(of: phoneEvents, "the phone hearing of the refusal") { event in
                if case .error(let error) = event { error.message.contains("value-too-large") } else { false }
            }
            try await phone.waitUntilIdle(timeout: .seconds(30))
            try await watch.waitUntilIdle(timeout: .seconds(30))
            #expect(try pair.watch.storedValue(for: TestKeys.blob) == nil)
            #expect(try pair.phone.storedValue(for: TestKeys.blob) == Self.between)
        }
    }
}

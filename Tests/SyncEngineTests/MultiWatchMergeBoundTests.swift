import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A phone and several watches whose concurrent lists of a `union` key fit
/// two by two under `maxValueSize` but not all together: merges are capped
/// (`merge-too-large`), so joining is no longer associative, and the value a
/// device ends with could depend on the order the lists meet. Whatever that
/// order (one watch after the other, frame by frame interleaved, seeded
/// random schedules, queued delivery), every device must end with the same
/// value at the same version, a value `set` would accept, holding the newest
/// write.
@Suite(.timeLimit(.minutes(5))) struct MultiWatchMergeBoundTests {
    static func items(_ prefix: String, _ count: Int = 12) -> [String] { (0..<count).map { "\(prefix)-item-\(1000 + $0)" } }
    static func json(_ tags: [String]) throws -> [UInt8] { try TestKeys.tags.serializer.encode(tags) }

    /// The largest union of `fitting` of the lists: the limit; checks that every union of one more does not fit.
    static func limit(for lists: [[String]], fitting: Int) throws -> Int {
        func unions(_ size: Int, from start: Int = 0) -> [[String]] {
            guard size > 0 else { return [[]] }
            guard start < lists.count else { return [] }
            return unions(size - 1, from: start + 1).map { lists[start] + $0 } + unions(size, from: start + 1)
        }
        let limit = try unions(fitting).map { try json(Array(Set($0)).sorted()).count }.max() ?? 0
        for union in unions(fitting + 1) { #expect(try json(Array(Set(union)).sorted()).count > limit) }
        return limit
    }

    // MARK: live sessions, driven frame by frame

    /// Devices 0 (the phone) and 1... (the watches), each with a manual clock and
    /// the same `maxValueSize`; one hand-driven session per watch.
    final class Hub {
        let folder = TempFolder()
        let clocks: [ManualClock]
        let stores: [SyncStore]
        let phoneEnds: [ReplicationEndpoint]
        let watchEnds: [ReplicationEndpoint]
        /// Frames in flight on watch `i`'s link, to the watch and to the phone.
        var toWatch: [[Frame]]
        var toPhone: [[Frame]]

        init(watches: Int, limit: Int) throws {
            let registry = try KeyRegistry(TestKeys.all)
            let folder = self.folder
            let clocks = (0...watches).map { _ in ManualClock(now: 1_700_000_000_000) }
            let stores = try (0...watches).map { i in
                var options = StoreOptions(clock: clocks[i], encryption: .keyFile(path: folder.file("\(i).key")))
                options.maxValueSize = limit
                return try SyncStore(path: folder.file("\(i).sqlite"), role: i == 0 ? .phone : .watch, registry: registry, options: options)
            }
            let config = ReplicationConfiguration(pairingEpoch: "hub")
            self.clocks = clocks
            self.stores = stores
            phoneEnds = (0..<watches).map { _ in ReplicationEndpoint(store: stores[0], configuration: config) }
            watchEnds = (1...watches).map { ReplicationEndpoint(store: stores[$0], configuration: config) }
            toWatch = Array(repeating: [], count: watches)
            toPhone = Array(repeating: [], count: watches)
        }

        var watchCount: Int { watchEnds.count }

        /// Each device writes its list at its own time (`times[i]` ms after the common start): all concurrent.
        func write(_ lists: [[String]], at times: [Int64]) async throws {
            for (i, store) in stores.enumerated() {
                clocks[i].advance(by: times[i])
                try await store.set(lists[i], for: TestKeys.tags)
            }
        }

        func start(_ w: Int) {
            toWatch[w] += phoneEnds[w].start(now: 0)
            toPhone[w] += watchEnds[w].start(now: 0)
        }

        /// Delivers the first frame in flight on watch `w`'s link towards the phone or the watch.
        @discardableResult func deliverOne(_ w: Int, toThePhone: Bool) -> Bool {
            if toThePhone {
                guard !toPhone[w].isEmpty else { return false }
                toWatch[w] += phoneEnds[w].receive(toPhone[w].removeFirst(), now: 0)
            } else {
                guard !toWatch[w].isEmpty else { return false }
                toPhone[w] += watchEnds[w].receive(toWatch[w].removeFirst(), now: 0)
            }
            return true
        }

        /// Lets both ends of watch `w`'s session send what they have.
        func pump(_ w: Int) {
            toWatch[w] += phoneEnds[w].pump(now: 0)
            toPhone[w] += watchEnds[w].pump(now: 0)
        }

        var inFlight: Bool { !(toWatch + toPhone).allSatisfy(\.isEmpty) }

        /// Runs watch `w`'s link until nothing more moves on it.
        func settle(_ w: Int) {
            for _ in 0..<10_000 {
                while deliverOne(w, toThePhone: true) || deliverOne(w, toThePhone: false) {}
                pump(w)
                if toWatch[w].isEmpty && toPhone[w].isEmpty { return }
            }
        }

        /// Settles every link, over and over, until a whole pass moves nothing.
        func settleAll() {
            for _ in 0..<100 {
                var moved = false
                for w in 0..<watchCount {
                    pump(w)
                    if !toWatch[w].isEmpty || !toPhone[w].isEmpty { moved = true }
                    settle(w)
                }
                if !moved { return }
            }
        }
    }

    /// Every device holds the same list at the same version: within the limit, with the newest write's items.
    static func expectConverged(_ stores: [SyncStore], limit: Int, newest: [String], _ label: String,
                                sourceLocation: SourceLocation = #_sourceLocation) throws {
        let values = try stores.map { try $0.storedValue(for: TestKeys.tags) }
        let versions = try stores.map { try $0.entryInfo(forKey: TestKeys.tags.name)?.version }
        #expect(Set(values.map { $0 ?? [] }).count == 1, "\(label): values differ: \(values.map { $0?.count ?? -1 })", sourceLocation: sourceLocation)
        #expect(Set(versions.map { $0?.description ?? "none" }).count == 1, "\(label): versions differ: \(versions)",
                sourceLocation: sourceLocation)
        let value = try #require(values.first ?? nil, sourceLocation: sourceLocation)
        #expect(try json(value).count <= limit, "\(label): a value over the limit", sourceLocation: sourceLocation)
        #expect(Set(newest).isSubset(of: value), "\(label): the newest write is lost", sourceLocation: sourceLocation)
        for store in stores { #expect(store.syncCounters.entriesRejected == 0, "\(label): refused on the wire", sourceLocation: sourceLocation) }
    }

    /// Who writes when (ms after the start; every time distinct): each device in turn the newest, and the oldest.
    static func timings(devices: Int) -> [[Int64]] {
        let ascending = (0..<devices).map { Int64(10 * ($0 + 1)) }
        var out: [[Int64]] = [ascending, ascending.reversed()]
        for newest in 0..<devices {
            var t = ascending
            t.swapAt(newest, devices - 1)
            out.append(t)
            var u = t
            if devices > 2 { u.swapAt(0, devices - 2) }
            out.append(u)
        }
        return out
    }

    enum Schedule: CaseIterable {
        /// Each watch's link settles alone, in the watches' order, then all again.
        case watchByWatch
        /// The same, last watch first.
        case lastWatchFirst
        /// One frame at a time on every link and in both directions, round robin.
        case interleaved
        /// Every link's opening frames cross before anything is answered, then round robin the other way.
        case crossing
    }

    static func run(_ schedule: Schedule, _ hub: Hub) {
        let watches = Array(0..<hub.watchCount)
        for w in watches { hub.start(w) }
        switch schedule {
        case .watchByWatch:
            for w in watches { hub.settle(w) }
        case .lastWatchFirst:
            for w in watches.reversed() { hub.settle(w) }
        case .interleaved, .crossing:
            let order = schedule == .interleaved ? watches : watches.reversed()
            for _ in 0..<10_000 {
                var moved = false
                for w in order {
                    if schedule == .crossing { hub.pump(w) }
                    for toThePhone in schedule == .interleaved ? [true, false] : [false, true] where hub.deliverOne(w, toThePhone: toThePhone) {
                        moved = true
                    }
                }
                if !moved {
                    for w in order { hub.pump(w) }
                    if !hub.inFlight { break }
                }
            }
        }
        hub.settleAll()
    }

    /// Phone and two watches, each list fits with any other but not with both.
    @Test(arguments: Schedule.allCases)
    func twoWatchesConvergeWhateverTheOrder(_ schedule: Schedule) async throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b")]
        let limit = try Self.limit(for: lists, fitting: 2)
        for times in Self.timings(devices: 3) {
            let hub = try Hub(watches: 2, limit: limit)
            try await hub.write(lists, at: times)
            Self.run(schedule, hub)
            let newest = lists[times.indices.max { times[$0] < times[$1] }!]
            try Self.expectConverged(hub.stores, limit: limit, newest: newest, "\(schedule) \(times)")
        }
    }

    /// With room for all the lists, every device ends with all of them,
    /// whatever the order: a merge has seen its two inputs only, so a third
    /// list, concurrent with both and older than the merge, still joins it.
    @Test(arguments: Schedule.allCases)
    func listsThatFitTogetherAreAllKeptWhateverTheOrder(_ schedule: Schedule) async throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b")]
        let all = Array(Set(lists.joined())).sorted()
        for times in Self.timings(devices: 3) {
            let hub = try Hub(watches: 2, limit: StoreOptions().maxValueSize)
            try await hub.write(lists, at: times)
            Self.run(schedule, hub)
            try Self.expectConverged(hub.stores, limit: .max, newest: all, "\(schedule) \(times)")
        }
    }

    /// The planner's view of one device: the newest list merges in, then an older concurrent one arrives.
    @Test func aMergeStillJoinsAThirdConcurrentListThatArrivesLater() throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b")]
        let states = try lists.enumerated().map { i, list in
            EntryState(version: HLCTimestamp(physicalMilliseconds: 1_000 * Int64(i + 1), counter: 0, node: UInt32(i + 1)), base: .zero,
                       deleted: false, value: try Self.json(list))
        }
        let roomy = StoreOptions().maxValueSize
        // The phone wrote the oldest list; the newest arrives, then the middle one.
        let merged = try MergeSizeBoundTests.apply(states[2], over: states[0], limit: roomy).state
        #expect(merged.version == states[2].version)
        let all = try MergeSizeBoundTests.apply(states[1], over: merged, limit: roomy)
        #expect(all.state.value == (try Self.json(Array(Set(lists.joined())).sorted())), "\(all.verdict)")
        #expect(all.state.version == states[2].version)
    }

    /// Phone and three watches: any two lists fit (or any three), never all four.
    @Test(arguments: [2, 3])
    func threeWatchesConvergeWhateverTheOrder(fitting: Int) async throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b"), Self.items("watch-c")]
        let limit = try Self.limit(for: lists, fitting: fitting)
        for schedule in Schedule.allCases {
            for times in Self.timings(devices: 4) {
                let hub = try Hub(watches: 3, limit: limit)
                try await hub.write(lists, at: times)
                Self.run(schedule, hub)
                let newest = lists[times.indices.max { times[$0] < times[$1] }!]
                try Self.expectConverged(hub.stores, limit: limit, newest: newest, "\(schedule) \(times) fitting \(fitting)")
            }
        }
    }

    /// Seeded random schedules: any link, any direction, one frame at a time,
    /// with pumps in between and a device writing again now and then.
    @Test(arguments: 0..<8)
    func randomSchedulesConverge(seedBlock: Int) async throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b"), Self.items("watch-c")]
        for seed in UInt64(seedBlock * 8)..<UInt64(seedBlock * 8 + 8) {
            var random = SplitMix(seed: seed)
            let watches = 2 + Int(random.next() % 2)
            let used = Array(lists.prefix(watches + 1))
            let limit = try Self.limit(for: used, fitting: 2)
            let hub = try Hub(watches: watches, limit: limit)
            var times = (0...watches).map { Int64(10 * ($0 + 1)) }
            for i in stride(from: times.count - 1, to: 0, by: -1) { times.swapAt(i, Int(random.next() % UInt64(i + 1))) }
            try await hub.write(used, at: times)
            var newest = used[times.indices.max { times[$0] < times[$1] }!]
            for w in 0..<watches { hub.start(w) }
            for step in 0..<400 {
                let w = Int(random.next() % UInt64(watches))
                if step == 150 {
                    // A device adds to its list after what it has seen (a causal write, the newest).
                    let device = Int(random.next() % UInt64(watches + 1))
                    hub.clocks[device].advance(by: 1_000)
                    let seen = try hub.stores[device].storedValue(for: TestKeys.tags) ?? []
                    let added = Array(Set(seen + ["late-\(seed)"])).sorted()
                    if try Self.json(added).count <= limit {
                        try await hub.stores[device].set(added, for: TestKeys.tags)
                        newest = added
                    }
                } else if random.next() % 5 == 0 {
                    hub.pump(w)
                } else {
                    hub.deliverOne(w, toThePhone: random.next() % 2 == 0)
                }
            }
            hub.settleAll()
            try Self.expectConverged(hub.stores, limit: limit, newest: newest, "seed \(seed) times \(times)")
        }
    }

    // MARK: queued delivery

    /// The phone with one mailbox per watch, rounds in several orders.
    /// With `fitting` 3 every list fits with the others: all must be kept.
    @Test(arguments: [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]], [2, 3])
    func throughMailboxesConvergeWhateverTheOrder(rounds order: [Int], fitting: Int) async throws {
        let lists = [Self.items("phone"), Self.items("watch-a"), Self.items("watch-b")]
        let limit = try Self.limit(for: lists, fitting: fitting)
        for times in Self.timings(devices: 3) {
            let hub = try Hub(watches: 2, limit: limit)
            try await hub.write(lists, at: times)
            // Each watch its own pairing and mailbox, as an app pairs each watch.
            let pairings = (0..<2).map { _ in PairingSecret.generate() }
            let peers = hub.stores.enumerated().map { i, store in
                SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: pairings[max(0, i - 1)].epoch))
            }
            let phoneBoxes = try (0..<2).map { try Mailbox(directory: hub.folder.file("box\($0)"), role: .phone, secret: pairings[$0]) }
            let watchBoxes = try (0..<2).map { try Mailbox(directory: hub.folder.file("box\($0)"), role: .watch, secret: pairings[$0]) }
            // `order` names who runs a round: 0 the phone (with every watch's mailbox, in turn), 1 and 2 the watches.
            func round(_ device: Int) throws -> [QueuedDeliveryReport] {
                device == 0 ? try (0..<2).map { try peers[0].deliverQueued(through: phoneBoxes[order.first == 0 ? $0 : 1 - $0]) }
                            : [try peers[device].deliverQueued(through: watchBoxes[device - 1])]
            }
            var quiet = false
            for _ in 0..<40 where !quiet {
                let reports = try order.flatMap { try round($0) }
                for report in reports { #expect(report.refused.isEmpty && report.failure == nil, "\(report)") }
                quiet = reports.allSatisfy { $0.messagesRead == 0 && $0.messagesPosted == 0 }
            }
            #expect(quiet, "queued delivery came to rest")
            let newest = fitting == 3 ? Array(Set(lists.joined())) : lists[times.indices.max { times[$0] < times[$1] }!]
            try Self.expectConverged(hub.stores, limit: limit, newest: newest, "mailbox \(order) \(times) fitting \(fitting)")
        }
    }
}

/// A small seeded generator (SplitMix64): the same schedule for a seed on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

@Suite struct ReplicationTests {
    /// Every availability × policy, written on each side that may write it:
    /// where the rules forbid it, neither the value nor the key name appears in any frame.
    @Test(arguments: DeviceRole.allCases)
    func policyMatrix(writer: DeviceRole) async throws {
        var keys: [any KeyDeclaration] = []
        for availability in Availability.allCases {
            for policy in SyncPolicy.allCases {
                keys.append(Key<String>("m-\(availability.rawValue)-\(policy.rawValue)", default: "", availability: availability, policy: policy))
            }
        }
        let pair = try Pair(keys: keys)
        let writerStore = writer == .phone ? pair.phone : pair.watch
        let readerStore = writer == .phone ? pair.watch : pair.phone
        var written: [Key<String>] = []
        for case let key as Key<String> in keys where key.descriptor.availability.canWrite(on: writer) {
            try await writerStore.set("value-of-\(key.name)", for: key)
            written.append(key)
        }
        let link = Link(pair.phone, pair.watch)
        link.connect()
        for key in written where key.descriptor.policy != .manual {
            let expected = key.descriptor.replicates(from: writer)
            #expect(try readerStore.storedValue(for: key) == (expected ? "value-of-\(key.name)" : nil), "\(key.name)")
        }
        _ = try writerStore.requestManualSync()
        link.settle()
        let bytes = link.allBytes
        for key in written {
            let expected = key.descriptor.replicates(from: writer)
            #expect(try readerStore.storedValue(for: key) == (expected ? "value-of-\(key.name)" : nil), "\(key.name)")
            if expected { #expect(link.entryKeys.contains(key.descriptor.name), "\(key.name) was sent") }
            if !expected {
                #expect(!bytes.contains(subsequence: Array("value-of-\(key.name)".utf8)), "value of \(key.name) leaked")
                if key.descriptor.policy == .never || key.descriptor.availability == .phoneOnly || key.descriptor.availability == .watchOnly {
                    #expect(!bytes.contains(subsequence: Array(key.name.utf8)), "name of \(key.name) leaked")
                    #expect(!link.entryKeys.contains(key.descriptor.name), "entry of \(key.name) sent")
                }
            }
        }
    }

    @Test func manualWaitsForSync() async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try pair.watch.storedValue(for: TestKeys.name) == nil)
        #expect(try pair.phone.pendingSummary().manualWaiting == 1)
        #expect(try pair.phone.requestManualSync() == 1)
        link.settle()
        #expect(try await pair.watch.get(TestKeys.name) == "Ada")
        #expect(try pair.phone.pendingSummary().total == 0)
    }

    @Test func hundredKilobyteBoundary() async throws {
        let atLimit = Data(repeating: 0x61, count: SyncPolicy.automaticLimit)
        let overLimit = Data(repeating: 0x62, count: SyncPolicy.automaticLimit + 1)
        let big = KeyFamily<Data>("big", default: Data(), availability: .all, policy: .automaticSmall, serializer: .data)
        let pair2 = try Pair(keys: TestKeys.all + [big])
        let pevents = pair2.phone.events()
        try await pair2.phone.set(atLimit, for: big["at"])
        try await pair2.phone.set(overLimit, for: big["over"])
        let deferred = try await first(of: pevents, "the phone's first event")
        #expect(deferred == .deferred(key: "big:over", size: SyncPolicy.automaticLimit + 1))
        #expect(pair2.phone.syncCounters.deferred == 1)
        let link = Link(pair2.phone, pair2.watch)
        link.connect()
        #expect(try pair2.watch.storedValue(for: big["at"]) == atLimit)
        #expect(try pair2.watch.storedValue(for: big["over"]) == nil)
        #expect(try pair2.phone.pendingSummary().manualWaiting == 1)
        try pair2.phone.requestManualSync()
        link.settle()
        #expect(try pair2.watch.storedValue(for: big["over"]) == overLimit)
        #expect(pair2.phone.syncCounters.chunksSent == 2)
    }

    @Test func reconnectSendsOnlyChanges() async throws {
        let pair = try Pair()
        try pair.phone.batchNow { batch in
            for i in 0..<10_000 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
        }
        let first = Link(pair.phone, pair.watch)
        first.connect()
        #expect(pair.watch.syncCounters.entriesReceived == 10_000)
        try pair.phone.batchNow { batch in
            for i in 0..<10 { try batch.set(-i - 1, for: TestKeys.daily["d\(i)"]) }
        }
        let sentBefore = pair.phone.syncCounters.entriesSent
        let second = Link(pair.phone, pair.watch)
        second.connect()
        #expect(pair.phone.syncCounters.entriesSent - sentBefore == 10)
        #expect(try await pair.watch.get(TestKeys.daily["d3"]) == -4)
        #expect(pair.watch.syncCounters.entriesSent == 0)  // nothing echoed back
    }

    @Test(arguments: [Int64(-600_000), 600_000])
    func clockSkewKeepsCausalOrder(skew: Int64) async throws {
        let pair = try Pair()
        pair.watchClock.setSkew(skew)
        try await pair.phone.set(1, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        pair.watchClock.advance(by: 10)
        try await pair.watch.set(2, for: TestKeys.steps)  // causally after the phone's write
        link.settle()
        #expect(try await pair.phone.get(TestKeys.steps) == 2)
        #expect(try await pair.watch.get(TestKeys.steps) == 2)
    }

    @Test func concurrentWritesSameWinnerBothSides() async throws {
        let pair = try Pair()
        try await pair.phone.set(10, for: TestKeys.steps)
        pair.watchClock.advance(by: 5)
        try await pair.watch.set(20, for: TestKeys.steps)  // later physical time: wins
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try await pair.phone.get(TestKeys.steps) == 20)
        #expect(try await pair.watch.get(TestKeys.steps) == 20)
        let phoneLog = try pair.phone.conflictLog()
        let watchLog = try pair.watch.conflictLog()
        #expect(phoneLog.count == 1 && watchLog.count == 1)
        #expect(phoneLog.first?.winner == .remote && watchLog.first?.winner == .local)
        #expect(phoneLog.first?.rule == .lastWriterWins)
    }

    @Test func tieBreaksOnNodeID() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let clock = ManualClock(now: 5_000)
        var options = StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("k")))
        options.nodeID = 7
        let phone = try SyncStore(path: folder.file("p"), role: .phone, registry: registry, options: options)
        options.nodeID = 9
        let watch = try SyncStore(path: folder.file("w"), role: .watch, registry: registry, options: options)
        try await phone.set(1, for: TestKeys.steps)
        try await watch.set(2, for: TestKeys.steps)  // same physical ms and counter: node 9 wins
        Link(phone, watch).connect()
        #expect(try await phone.get(TestKeys.steps) == 2)
        #expect(try await watch.get(TestKeys.steps) == 2)
    }

    @Test func resolverMergesConcurrentWrites() async throws {
        let pair = try Pair()
        try await pair.phone.set(["a", "b"], for: TestKeys.tags)
        try await pair.watch.set(["c"], for: TestKeys.tags)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        #expect(try await pair.phone.get(TestKeys.tags) == ["a", "b", "c"])
        #expect(try await pair.watch.get(TestKeys.tags) == ["a", "b", "c"])
        #expect(try pair.phone.conflictLog().first?.rule == .resolver)
        #expect(try pair.phone.entryInfo(forKey: "tags")?.version == pair.watch.entryInfo(forKey: "tags")?.version)
    }

    @Test func deleteBeatsOlderWriteAndIsNeverUndone() async throws {
        let pair = try Pair()
        try await pair.phone.set(1, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        // Concurrent: watch writes, phone deletes later.
        try await pair.watch.set(2, for: TestKeys.steps)
        pair.phoneClock.advance(by: 100)
        try await pair.phone.remove(TestKeys.steps)
        let staleFrame = SyncMessage.batch(.init(id: 999, entries: [WireEntry(
            key: TestKeys.steps.name, version: HLCTimestamp(physicalMilliseconds: 1, counter: 0, node: pair.watch.nodeID),
            base: .zero, deleted: false, encoding: "json", value: Array("5".utf8))])).frame()
        link.settle()
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
        // A stale value arriving late (a duplicated old frame) changes nothing.
        _ = link.b.receive(staleFrame, now: link.now)
        _ = link.a.receive(staleFrame, now: link.now)
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == nil)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
    }

    @Test func duplicatedAndReorderedFramesAreHarmless() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        var frames: [Frame] = []
        for i in 1...4 {  // four batches: the window's size
            try await pair.phone.set(i, for: TestKeys.steps)
            frames += link.a.pump(now: link.now)
        }
        #expect(frames.count == 4)
        // Deliver in reverse order, each twice.
        for frame in (frames + frames).reversed() { _ = link.b.receive(frame, now: link.now) }
        #expect(try await pair.watch.get(TestKeys.steps) == 4)
        let received = pair.watch.syncCounters
        #expect(received.entriesReceived == 8 && received.entriesIgnored == 7)
    }

    @Test func restartMidSyncLosesNothing() async throws {
        var pair = try Pair()
        try pair.phone.batchNow { batch in
            for i in 0..<5_000 { try batch.set(i, for: TestKeys.daily["r\(i)"]) }
        }
        let link = Link(pair.phone, pair.watch)
        let hellos = (link.a.start(now: 0), link.b.start(now: 0))
        let answersToPhone = hellos.1.flatMap { link.a.receive($0, now: 0) }
        let answersToWatch = hellos.0.flatMap { link.b.receive($0, now: 0) }
        // More entries than one batch holds (maxBatchEntries). Deliver only the first batch, then the watch "crashes" before acking the rest.
        let toWatch = answersToPhone.filter { $0.type == SyncMessage.MessageType.batch.rawValue }
        _ = answersToWatch.flatMap { link.a.receive($0, now: 0) }
        #expect(!toWatch.isEmpty)
        _ = link.b.receive(toWatch[0], now: 0)  // applied and acked, ack lost
        pair.watch.close()
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(),
                                   options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key"))))
        let received = try pair.watch.allEntryInfo().count
        #expect(received > 0 && received < 5_000)
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.watch.allEntryInfo().count == 5_000)
        for i in stride(from: 0, to: 5_000, by: 97) {
            #expect(try await pair.watch.get(TestKeys.daily["r\(i)"]) == i)
        }
        #expect(try pair.phone.pendingSummary().total == 0)
    }

    @Test func keyMismatchReportedByNameOthersSync() async throws {
        let folder = TempFolder()
        let shared = Key<Int>("shared", default: 0)
        let phoneView = Key<Int>("disputed", default: 0, policy: .automaticSmall)
        let watchView = Key<Int>("disputed", default: 0, policy: .manual)
        let phone = try SyncStore(path: folder.file("p"), role: .phone, registry: try KeyRegistry([shared, phoneView]))
        let watch = try SyncStore(path: folder.file("w"), role: .watch, registry: try KeyRegistry([shared, watchView]))
        let events = phone.events()
        try await phone.set(1, for: shared)
        try await phone.set(2, for: phoneView)
        Link(phone, watch).connect()
        #expect(try await watch.get(shared) == 1)
        #expect(try watch.storedValue(for: watchView) == nil)
        let mismatch = try await first(of: events, "the key-mismatch event") {
            if case .keyMismatch = $0 { true } else { false }
        }
        #expect(mismatch == .keyMismatch(keys: ["disputed"]))
        #expect(try phone.entryInfo(forKey: "disputed")?.isPending == true)
    }

    @Test func handshakeRefusesPhoneWithPhoneAndOtherPairing() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry([TestKeys.steps])
        let a = try SyncStore(path: folder.file("a"), role: .phone, registry: registry)
        let b = try SyncStore(path: folder.file("b"), role: .phone, registry: registry)
        try await a.set(1, for: TestKeys.steps)
        let link = Link(a, b)
        link.connect()
        #expect(link.a.failure?.code == .handshakeFailed)
        #expect(try b.storedValue(for: TestKeys.steps) == nil)
        let c = try SyncStore(path: folder.file("c"), role: .watch, registry: registry)
        let other = ReplicationEndpoint(store: c, configuration: ReplicationConfiguration(pairingEpoch: "other"))
        let mine = ReplicationEndpoint(store: a, configuration: ReplicationConfiguration(pairingEpoch: "mine"))
        let frames = mine.start(now: 0).flatMap { other.receive($0, now: 0) }
        #expect(other.failure?.code == .pairingMismatch)
        _ = frames.flatMap { mine.receive($0, now: 0) }
        #expect(try c.storedValue(for: TestKeys.steps) == nil)
    }

    @Test func newWatchRebaselinesFully() async throws {
        let pair = try Pair()
        try await pair.phone.set(1, for: TestKeys.steps)
        try await pair.watch.set(["w"], for: TestKeys.tags)
        Link(pair.phone, pair.watch).connect()
        let newWatch = try SyncStore(path: pair.folder.file("watch2.sqlite"), role: .watch, registry: try TestKeys.registry(),
                                     options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch2.key"))))
        Link(pair.phone, newWatch, epoch: "second-pairing").connect()
        #expect(try await newWatch.get(TestKeys.steps) == 1)
        #expect(try await newWatch.get(TestKeys.tags) == ["w"])  // learned from the old watch, re-sent by the phone
    }

    @Test func largeValueResumesAfterDisconnect() async throws {
        let pair = try Pair()
        let value = Data((0..<(600 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try await pair.phone.set(value, for: TestKeys.blob)
        try pair.phone.requestManualSync()
        let link = Link(pair.phone, pair.watch)
        let hello = link.a.start(now: 0)
        let fromWatch = link.b.start(now: 0) + hello.flatMap { link.b.receive($0, now: 0) }
        let fromPhone = fromWatch.flatMap { link.a.receive($0, now: 0) }
        let chunks = fromPhone.filter { $0.type == SyncMessage.MessageType.chunk.rawValue }
        #expect(chunks.count == 10)  // the whole value: 10 chunks of 64 KB fit the window (16)
        for chunk in chunks.prefix(3) { _ = link.b.receive(chunk, now: 0) }  // then the link drops
        let second = Link(pair.phone, pair.watch)
        second.connect()
        #expect(try await pair.watch.get(TestKeys.blob) == value)
        let chunkFrames = second.frames.filter { $0.frame.type == SyncMessage.MessageType.chunk.rawValue }
        #expect(chunkFrames.count == 10 - 3)  // resumed after the three staged chunks
    }

    @Test func receiptQuery() async throws {
        let pair = try Pair()
        try await pair.phone.set(3, for: TestKeys.steps)
        let version = try pair.phone.entryInfo(forKey: TestKeys.steps.name)!.version
        #expect(try !pair.phone.peerHas(key: TestKeys.steps.name, atLeast: version))
        Link(pair.phone, pair.watch).connect()
        #expect(try pair.phone.peerHas(key: TestKeys.steps.name, atLeast: version))
        #expect(try pair.watch.peerHas(key: TestKeys.steps.name, atLeast: version))
    }

    @Test func encryptedKeysSyncAndStayEncrypted() async throws {
        let pair = try Pair()
        try await pair.phone.set("s3cret-value", for: TestKeys.secret)
        Link(pair.phone, pair.watch).connect()
        #expect(try await pair.watch.get(TestKeys.secret) == "s3cret-value")
        #expect(try pair.watch.entryInfo(forKey: "secret")?.isEncrypted == true)
    }

    @Test func malformedFramesFailTheSessionNotTheStore() async throws {
        let pair = try Pair()
        try await pair.watch.set(1, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let out = link.b.receive(Frame(type: SyncMessage.MessageType.batch.rawValue, payload: [1, 0xFF, 0xFF, 0xFF]), now: 0)
        #expect(link.b.failure?.code == .malformedMessage)
        #expect(out.count == 1 && out[0].type == SyncMessage.MessageType.error.rawValue)
        #expect(try await pair.watch.get(TestKeys.steps) == 1)
        let wrongSchema = link.a.receive(Frame(type: 1, payload: [9]), now: 0)
        #expect(link.a.failure?.message.contains("schema 9") == true)
        _ = wrongSchema
    }

    @Test func statusEventsDuringSync() async throws {
        let pair = try Pair()
        let events = pair.phone.events()
        try await pair.phone.set(1, for: TestKeys.steps)
        Link(pair.phone, pair.watch).connect()
        let seen = try await withDeadline("the connected and batch-sent events") {
            var seen: [String] = []
            for await event in events {
                switch event {
                case .connected: seen.append("connected")
                case .batchSent: seen.append("batch")
                default: break
                }
                if seen.count == 2 { break }
            }
            return seen
        }
        #expect(seen == ["connected", "batch"])
        #expect(pair.phone.syncCounters.entriesSent == 1)
        #expect(pair.phone.syncCounters.batchesSent == 1)
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// A paired watch (or a device using its node id) whose messages are well
/// formed but claim what never happened. Step by step, without sockets.
@Suite struct HostileSessionTests {
    /// Runs a session until quiet; `fromWatch` may change or drop each frame the watch sends.
    static func exchange(_ phone: ReplicationEndpoint, _ watch: ReplicationEndpoint, start: Bool, now: Int64 = 1_000,
                         fromWatch: (Frame) -> Frame? = { $0 }) {
        run(phone, watch, toWatch: start ? phone.start(now: now) : phone.pump(now: now),
            toPhone: (start ? watch.start(now: now) : watch.pump(now: now)).compactMap(fromWatch), now: now, fromWatch: fromWatch)
    }

    /// Delivers frames both ways until quiet, starting from the given ones.
    static func run(_ phone: ReplicationEndpoint, _ watch: ReplicationEndpoint, toWatch: [Frame], toPhone: [Frame], now: Int64 = 1_000,
                    fromWatch: (Frame) -> Frame? = { $0 }) {
        var (toWatch, toPhone) = (toWatch, toPhone)
        for _ in 0..<10_000 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let (sendWatch, sendPhone) = (toWatch, toPhone)
            (toWatch, toPhone) = ([], [])
            for frame in sendPhone { toWatch += phone.receive(frame, now: now) }
            for frame in sendWatch { toPhone += watch.receive(frame, now: now).compactMap(fromWatch) }
        }
    }

    /// A new session of the pair, run until quiet, then ended.
    static func session(_ pair: Pair) {
        let (phone, watch) = ReceiptTests.endpoints(pair)
        exchange(phone, watch, start: true)
        #expect(phone.failure == nil && watch.failure == nil)
        phone.connectionLost()
        watch.connectionLost()
    }

    /// A receipt that acknowledged far more of the phone's stream than it
    /// wrote, with a version past any clock, was recorded by the phone, which
    /// then vouched for it in every later receipt: the watch skipped what it
    /// wrote meanwhile, session after session.
    @Test func aReceiptClaimingMoreThanWasWrittenCostsNoLaterWrite() async throws {
        let pair = try Pair()
        try await pair.watch.set(["a"], for: TestKeys.tags)
        let (phone, watch) = ReceiptTests.endpoints(pair)
        Self.exchange(phone, watch, start: true) { frame in
            guard case .receipt(var receipt)? = try? SyncMessage(frame: frame) else { return frame }
            receipt.acknowledgedThrough = 1 << 40
            receipt.acknowledgedAnchor = Int64.max
            return SyncMessage.receipt(receipt).frame()
        }
        #expect(phone.failure == nil && watch.failure == nil)
        phone.connectionLost()
        watch.connectionLost()
        #expect(try pair.phone.receivedThrough(from: pair.watch.nodeID).through < 1 << 40)

        try await pair.watch.set(7, for: TestKeys.daily["later"])
        Self.session(pair)
        try await pair.watch.set(8, for: TestKeys.daily["later2"])
        Self.session(pair)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["later"]) == 7)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["later2"]) == 8)
    }

    /// The same claim in a batch's stream range.
    @Test func aStreamRangeFarAheadCostsNoLaterWrite() async throws {
        let pair = try Pair()
        let (phone, watch) = ReceiptTests.endpoints(pair)
        Self.exchange(phone, watch, start: true)
        let hostile = SyncMessage.batch(.init(id: 1 << 50, entries: [], range: .init(lower: 0, upper: 1 << 40, anchor: Int64.max)))
        _ = phone.receive(hostile.frame(protocolVersion: SyncMessage.highestProtocolVersion), now: 5_000)
        #expect(phone.failure == nil)
        phone.connectionLost()
        watch.connectionLost()
        #expect(try pair.phone.receivedThrough(from: pair.watch.nodeID).through < 1 << 40)
        try await pair.watch.set(7, for: TestKeys.daily["later"])
        Self.session(pair)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["later"]) == 7)
    }

    /// A phone whose record of the watch's stream names a version the watch
    /// never reached (recorded by a build before the bound, or a power cut
    /// that took the watch's tail): the watch skips nothing.
    @Test func aWatchSkipsNothingForARecordPastItsOwnClock() async throws {
        let pair = try Pair()
        Self.session(pair)
        try pair.phone.recordReceived(from: pair.watch.nodeID, through: 1 << 40, anchor: Int64.max)
        try await pair.watch.set(7, for: TestKeys.daily["later"])
        Self.session(pair)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["later"]) == 7)
    }

    /// A hello of another node on an established connection re-established
    /// the phone's session with it, which still ended as the first node's:
    /// the second watch's stream was recorded as received from the first,
    /// whose next session skipped its own write. It ends the session now.
    @Test func aHelloOfAnotherNodeInASessionEndsIt() async throws {
        let pair = try Pair()
        let clock2 = ManualClock()
        let watch2 = try SyncStore(path: pair.folder.file("watch2.sqlite"), role: .watch, registry: try KeyRegistry(TestKeys.all),
                                   options: StoreOptions(clock: clock2, encryption: .keyFile(path: pair.folder.file("watch2.key"))))
        let config = ReplicationConfiguration(pairingEpoch: "test")
        Self.session(pair)
        do {
            let phone = ReplicationEndpoint(store: pair.phone, configuration: config), w2 = ReplicationEndpoint(store: watch2, configuration: config)
            Self.exchange(phone, w2, start: true)
            phone.connectionLost()
            w2.connectionLost()
        }
        try await pair.watch.set(11, for: TestKeys.daily["w1"])
        clock2.advance(by: 60_000)
        for i in 0..<4 { try await watch2.set(i, for: TestKeys.daily["w2-\(i)"]) }

        // One connection: watch 1's hello, then (its batch lost) watch 2's hello and stream.
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
        let w1 = ReplicationEndpoint(store: pair.watch, configuration: config)
        var oneByOne = config
        oneByOne.maxBatchEntries = 1
        let w2 = ReplicationEndpoint(store: watch2, configuration: oneByOne)
        _ = w1.receive(phone.start(now: 1_000)[0], now: 1_000)
        _ = phone.receive(w1.start(now: 1_000)[0], now: 1_000).flatMap { w1.receive($0, now: 1_000) }
        #expect(phone.peerNode == pair.watch.nodeID)
        Self.run(phone, w2, toWatch: [], toPhone: w2.start(now: 1_000))
        #expect(phone.failure?.code == .protocolViolation)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["w2-3"]) == nil, "nothing of the second node's stream taken")
        phone.connectionLost()
        w1.connectionLost()
        w2.connectionLost()
        #expect(try pair.phone.receivedThrough(from: pair.watch.nodeID).through <= SQLiteReplicationPort(pair.watch).streamPosition())

        Self.session(pair)
        #expect(try pair.phone.storedValue(for: TestKeys.daily["w1"]) == 11)
        watch2.close()
    }

    /// The events `store` publishes while `body` runs (the store is closed after it, which ends them).
    static func events(of store: SyncStore, during body: () async throws -> Void) async throws -> [SyncEvent] {
        let stream = store.events()
        try await body()
        store.close()
        return try await all(of: stream, "the store's events")
    }

    /// Text with a forged log line and terminal escapes in it.
    static let forged = "health:daily:steps\n2026-01-01T00:00:00 info syncsim : FORGED-LINE \u{1b}[2K"

    static func isClean(_ text: String) -> Bool {
        !text.contains("\n") && !text.contains("\r") && !text.contains("\u{1b}")
    }

    /// An acknowledgement's refusals reach the `.error` event escaped and
    /// bounded: the peer's key names and codes went into it raw (a forged
    /// log line, terminal escapes) and all of them (20,000 made one message
    /// of megabytes).
    @Test func anAcknowledgementsRefusalsReachTheEventEscapedAndBounded() async throws {
        let pair = try Pair()
        let (phone, watch) = ReceiptTests.endpoints(pair)
        Self.exchange(phone, watch, start: true)
        try await pair.phone.set(5, for: TestKeys.steps)
        let batches = phone.pump(now: 2_000).compactMap { frame -> SyncMessage.Batch? in
            if case .batch(let batch)? = try? SyncMessage(frame: frame) { batch } else { nil }
        }
        let batch = try #require(batches.first)
        let rejected = Array(repeating: SyncMessage.Rejection(key: Self.forged, code: "policy-violation\r\u{1b}[31m"), count: 20_000)
        let events = try await Self.events(of: pair.phone) {
            _ = phone.receive(SyncMessage.ack(.init(batchID: batch.id, applied: 0, rejected: rejected)).frame(), now: 2_000)
            phone.connectionLost()
            watch.connectionLost()
        }
        let errors = events.compactMap { event -> SyncError? in if case .error(let error) = event { error } else { nil } }
        let error = try #require(errors.first)
        #expect(error.message.contains("20000"), "\(error.message.prefix(300))")
        #expect(error.message.contains("FORGED-LINE"))
        #expect(Self.isClean(error.message), "\(error.message.prefix(300))")
        #expect(error.message.count <= 8_192, "\(error.message.count) characters")
    }

    /// A hello's declarations reach the `keyMismatch` event escaped and
    /// bounded: every name only the peer declared was in it raw, 100,000 of
    /// them, and in the warning logged.
    @Test func aHellosDeclarationsReachTheMismatchEventEscapedAndBounded() async throws {
        let pair = try Pair()
        let ours = pair.phone.registry.wireDeclarations(from: .phone)
        // The watch declares the steps key as manual, and a flood of keys of its own.
        let steps = try #require(ours.first { $0.hasPrefix(TestKeys.steps.name + "|") })
        let theirs = ours.filter { $0 != steps } + [steps.replacingOccurrences(of: "|automaticSmall|", with: "|manual|")]
            + (0..<100_000).map { "flood:\($0)|all|automaticSmall|json|single|lww|untyped|none" } + [Self.forged + "|all|manual|json|single|lww|untyped|none"]
        let phone = ReplicationEndpoint(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: "test"))
        let events = try await Self.events(of: pair.phone) {
            _ = phone.start(now: 1_000)
            let hello = SyncMessage.hello(.init(protocolRange: 1...SyncMessage.highestProtocolVersion, node: pair.watch.nodeID, role: .watch,
                                                isReply: false, pairingEpoch: "test", registryFingerprint: KeyRegistry.fingerprint(of: theirs.sorted()),
                                                declarations: theirs.sorted(), partialTransfers: []))
            _ = phone.receive(hello.frame(), now: 1_000)
            #expect(phone.isEstablished)
            #expect(phone.mismatchedKeys.contains(TestKeys.steps.name))
            phone.connectionLost()
        }
        let mismatches = events.compactMap { event -> [String]? in if case .keyMismatch(let keys) = event { keys } else { nil } }
        let keys = try #require(mismatches.first)
        #expect(keys.contains(TestKeys.steps.name), "the key both declare, differently, is named")
        #expect(keys.count <= ours.count + 100, "\(keys.count) names")
        #expect(keys.allSatisfy(Self.isClean))
        #expect(Self.isClean(SyncEvent.keyMismatch(keys: keys).description))
    }

    /// A manual reply that answers no request of this side is not reported
    /// as the answer to one: a peer's unasked reply (or a late one, to an
    /// earlier request) was an accepted `manualRequestAnswered` event, and
    /// cleared the request this side awaited.
    @Test func aManualReplyToNoRequestIsNotReportedAsItsAnswer() async throws {
        let pair = try Pair()
        let (phone, watch) = ReceiptTests.endpoints(pair)
        Self.exchange(phone, watch, start: true)
        let events = try await Self.events(of: pair.phone) {
            let unasked = SyncMessage.manualReply(.init(id: 999, accepted: true, released: 5, replyID: 1 << 40))
            _ = phone.receive(unasked.frame(), now: 2_000)
            #expect(!phone.awaitsManualReply)
            let request = phone.requestManualChanges(now: 2_000)
            #expect(request.count == 1)
            _ = phone.receive(unasked.frame(), now: 2_000)
            #expect(phone.awaitsManualReply, "the request made still awaits its answer")
            // The watch's answer to the request made is its answer.
            for frame in request { for answer in watch.receive(frame, now: 2_000) { _ = phone.receive(answer, now: 2_000) } }
            #expect(!phone.awaitsManualReply)
            #expect(phone.failure == nil)
            phone.connectionLost()
            watch.connectionLost()
        }
        let answers = events.compactMap { event -> Int? in if case .manualRequestAnswered(_, let released) = event { released } else { nil } }
        #expect(answers == [0], "only the answer to the request made")
    }

    /// The messages of protocol 2 (caught-up notice, manual request, manual
    /// reply) end a session that negotiated protocol 1 with
    /// `protocol-violation`, as a receipt or a ranged batch ends one of
    /// protocol 2: a manual request released this side's manual changes and
    /// was answered with a message a peer of protocol 1 cannot read.
    @Test func protocol2MessagesEndAProtocol1Session() async throws {
        let messages: [SyncMessage] = [.manualRequest(.init(id: 50)), .manualReply(.init(id: 50, accepted: true, released: 0, replyID: 51)),
                                       .caughtUp(.init(id: 50))]
        for message in messages {
            let pair = try Pair()
            try await pair.phone.set("kept for sync()", for: TestKeys.name)
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.protocolRange = 1...1
            let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
            let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
            Self.exchange(phone, watch, start: true)
            #expect(phone.isEstablished && phone.failure == nil)
            let answer = phone.receive(message.frame(), now: 2_000)
            #expect(phone.failure?.code == .protocolViolation, "\(message)")
            #expect(!answer.contains { $0.type == SyncMessage.MessageType.manualReply.rawValue }, "\(message)")
            #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).manualWaiting == 1, "the manual change stays held: \(message)")
            phone.connectionLost()
            watch.connectionLost()
        }
    }

    /// A watch takes a new node id on its phone's `node-id-conflict` only in
    /// a session that negotiated protocol 6, as a phone sends it: an error of
    /// that code in a session of protocol 5 (which no phone of it sends), or
    /// before any session was established, made the watch drop its node id,
    /// and the phone then met it as a new watch (a full baseline).
    @Test func aNodeIDConflictOutsideAProtocol6SessionRenewsNothing() async throws {
        let conflict = SyncMessage.error(.init(code: SyncError.Code.nodeIDConflict.rawValue, message: "the watch's node id 1 belongs to a watch of another pairing"))
        for established in [true, false] {
            let pair = try Pair()
            let node = pair.watch.nodeID
            var config = ReplicationConfiguration(pairingEpoch: "test")
            config.protocolRange = 1...5
            let phone = ReplicationEndpoint(store: pair.phone, configuration: config)
            let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
            if established {
                Self.exchange(phone, watch, start: true)
                #expect(watch.isEstablished)
            } else {
                _ = watch.start(now: 1_000)
            }
            _ = watch.receive(conflict.frame(), now: 2_000)
            #expect(watch.failure?.code == .nodeIDConflict)
            #expect(pair.watch.nodeID == node, "established: \(established)")
            phone.connectionLost()
            watch.connectionLost()
        }
    }

    /// A family member's name is the peer's to choose: it reached the
    /// `versionRefused` event as it came, a forged log line and terminal
    /// escapes in it, up to a kilobyte.
    @Test func aPeersMemberNameReachesTheVersionRefusedEventEscapedAndBounded() async throws {
        let pair = try Pair()
        let (phone, watch) = HostileBatchSizeTests.protocolTwo(pair)
        Self.exchange(phone, watch, start: true)
        try #require(phone.isEstablished && phone.failure == nil)
        let key = TestKeys.daily["x\n2026-01-01T00:00:00 info syncsim : FORGED-LINE \u{1b}[2K" + String(repeating: "m", count: 900)].name
        let events = try await Self.events(of: pair.phone) {
            let entry = WireEntry(key: key, version: HLCTimestamp(packed: Int64.max, node: pair.watch.nodeID), base: .zero,
                                  deleted: false, encoding: "json", value: Array("7".utf8))
            _ = phone.receive(SyncMessage.batch(.init(id: 1 << 40, entries: [entry])).frame(protocolVersion: 2), now: 2_000)
            #expect(phone.failure == nil)
            phone.connectionLost()
            watch.connectionLost()
        }
        let refused = events.compactMap { event -> String? in if case .versionRefused(let key, _) = event { key } else { nil } }
        let name = try #require(refused.first)
        #expect(Self.isClean(name), "\(name.prefix(100))")
        #expect(name.count <= 300, "\(name.count) characters")
        #expect(Self.isClean(SyncEvent.versionRefused(key: name, aheadMilliseconds: 1).description))
    }

    /// A phone that never sends its receipt (protocol 3 and newer) left the
    /// watch waiting for it, silent, for as long as the connection lasted.
    /// Over a connection that delivers every frame the watch now ends the
    /// session with `timeout` once `receiptTimeoutMilliseconds` passed (by its ticks).
    @Test func aWatchWhosePhoneNeverSendsItsReceiptEndsTheSession() async throws {
        let pair = try Pair()
        try await pair.watch.set(["a"], for: TestKeys.tags)
        var config = ReplicationConfiguration(pairingEpoch: "test")
        config.receiptTimeoutMilliseconds = 4_000
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config, retransmits: false)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config, retransmits: false)
        ReceiptTests.exchange(phone, watch, start: true) { frame in
            if case .receipt? = try? SyncMessage(frame: frame) { return nil }
            return frame
        }
        try #require(watch.isEstablished && watch.failure == nil)
        let limit = config.receiptTimeoutMilliseconds
        _ = watch.tick(now: 1_000)
        let early = watch.tick(now: 1_000 + limit - 1)
        #expect(watch.failure == nil && early.isEmpty, "the watch waits for the receipt, silent, within the timeout")
        let late = watch.tick(now: 1_000 + limit)
        #expect(watch.failure?.code == .timeout)
        #expect(watch.failure?.message.contains("receipt") == true, "\(watch.failure?.message ?? "")")
        let notified = late.contains { if case .error? = try? SyncMessage(frame: $0) { true } else { false } }
        #expect(notified, "the phone is told why")
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == nil, "the watch sent nothing")
    }
}

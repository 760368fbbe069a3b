import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// Queued delivery between two stores through a mailbox directory: each side
/// runs rounds (`deliverQueued`) only while "running"; the other may be down.
@Suite struct QueuedDeliveryTests {
    let secret = PairingSecret.generate()

    func peers(_ pair: Pair, directory: String, limits: MailboxLimits = .default) throws
        -> (phone: SyncPeer, phoneBox: Mailbox, watch: SyncPeer, watchBox: Mailbox) {
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        return (SyncPeer(store: pair.phone, configuration: config),
                try Mailbox(directory: directory, role: .phone, secret: secret, limits: limits),
                SyncPeer(store: pair.watch, configuration: config),
                try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits))
    }

    /// The entries of the batches waiting in `mailbox`'s outbox.
    func queuedKeys(_ mailbox: Mailbox) throws -> [String] {
        try mailbox.outgoingMessages().flatMap { message -> [String] in
            guard case .batch(_, _, _, let entries) = try QueuedMessage(frame: message.frame) else { return [] }
            return entries.map(\.key)
        }
    }

    /// Every queued message decodes to itself; cut, extended or with a bad
    /// field it throws `malformed-message` (never traps).
    @Test func queuedMessagesRoundTripAndMalformedOnesAreRefused() throws {
        let header = QueuedHeader(protocolVersion: 2, node: 0x1001, role: .phone, pairingEpoch: "epoch", registryFingerprint: [1, 2, 3])
        let version = HLCTimestamp(packed: 1 << 30, node: 0x1001)
        let messages: [QueuedMessage] = [
            .batch(header, after: 0, through: 3, entries: [
                WireEntry(key: "health:daily:steps", version: version, base: .zero, deleted: false, encoding: "json", value: Array("12".utf8)),
                WireEntry(key: "units", version: version, base: version, deleted: true, encoding: "json", value: nil),
            ]),
            .ack(header, after: 0, through: 3, applied: 1, rejected: [SyncMessage.Rejection(key: "units", code: "unknown-key")]),
            .refusal(header, code: "key-declaration-mismatch", message: "another registry"),
            .rebaseline(header, purgedThrough: version.packed),
            .declarations(QueuedHeader(protocolVersion: 1, node: 0x1001, role: .phone, pairingEpoch: "epoch",
                                       registryFingerprint: KeyRegistry.fingerprint(of: ["a|x", "b|y"])), ["a|x", "b|y"], isAnswer: false),
            .caughtUpFollows(header),
            .caughtUp(header),
            .renewsNodeID(QueuedHeader(protocolVersion: 1, node: 0x2002, role: .watch, pairingEpoch: "epoch", registryFingerprint: [1, 2])),
        ]
        for message in messages {
            let frame = message.frame()
            #expect(try QueuedMessage(frame: frame) == message)
            for cut in 0..<frame.payload.count {
                #expect(throws: SyncError.self) { _ = try QueuedMessage(frame: Frame(type: frame.type, payload: Array(frame.payload[..<cut]))) }
            }
            #expect(throws: SyncError.self) { _ = try QueuedMessage(frame: Frame(type: frame.type, payload: frame.payload + [0])) }
        }
        var noPurge = QueuedMessage.rebaseline(header, purgedThrough: 1).frame()
        noPurge.payload.replaceSubrange((noPurge.payload.count - 8)..., with: [UInt8](repeating: 0, count: 8))
        do {
            _ = try QueuedMessage(frame: noPurge)
            Issue.record("a re-baseline notice without a purged version decoded")
        } catch let error as SyncError {
            #expect(error.code == .malformedMessage && error.message.contains("re-baseline"), "\(error)")
        }
        // A marker is an acknowledgement of a stretch no stream position reaches (in any generation), of nothing.
        let markers = [(QueuedMessage.caughtUpFollowsRange, QueuedMessage.caughtUpFollows(header)), (QueuedMessage.caughtUpRange, .caughtUp(header)),
                       (QueuedMessage.renewsNodeIDRange, .renewsNodeID(header))]
        #expect(Set(markers.map { "\($0.0)" } + ["\(MailboxReplicator.repairRange)"]).count == 4, "each names a stretch of its own")
        for (range, marker) in markers {
            #expect(marker.frame().type == QueuedMessage.MessageType.ack.rawValue)
            for generation in [0, 1, 2, QueuedStreamPosition.generations - 1, QueuedStreamPosition.generations] as [Int64] {
                #expect(QueuedStreamPosition.position(range.after, generation: generation) == nil)
                #expect(QueuedStreamPosition.position(range.through, generation: generation) == nil)
            }
            let counted = QueuedMessage.ack(header, after: range.after, through: range.through, applied: 1, rejected: []).frame()
            do {
                _ = try QueuedMessage(frame: counted)
                Issue.record("a \(marker.kindName) that names applied entries decoded")
            } catch let error as SyncError {
                #expect(error.code == .malformedMessage && error.message.contains(marker.kindName), "\(error)")
            }
        }
        // Declarations must be those the fingerprint they came with was taken of.
        let forged = QueuedMessage.declarations(header, ["a|x"], isAnswer: true).frame()
        do {
            _ = try QueuedMessage(frame: forged)
            Issue.record("declarations that do not match their fingerprint decoded")
        } catch let error as SyncError {
            #expect(error.code == .malformedMessage && error.message.contains("fingerprint"), "\(error)")
        }
        #expect(throws: SyncError.self) { _ = try QueuedMessage(frame: Frame(type: 0x16, payload: [1])) }
    }

    @Test func changesWrittenWhileThePeerIsDownArriveWhenItReadsAndAcknowledgementsMoveTheCursor() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path)
        // The watch is not running: the phone writes and queues.
        try await pair.phone.set(5, for: TestKeys.steps)
        try await pair.phone.set("imperial", for: TestKeys.units)
        try await pair.phone.set("phone secret", for: TestKeys.token)  // phoneOnly: never leaves the phone
        // No peer known yet: what any peer would get is pending (it was 0: local changes were taken as the unknown peer's).
        #expect(try pair.phone.pendingSummary().automatic == 2)
        let posted = try phone.deliverQueued(through: phoneBox)
        #expect(posted.messagesPosted == 1)
        #expect(try Set(queuedKeys(phoneBox)) == ["health:daily:steps", "units"])
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)

        // The watch starts and reads: the changes arrive, the acknowledgement goes back.
        let read = try watch.deliverQueued(through: watchBox)
        #expect(read.entriesApplied == 2)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        #expect(try pair.watch.storedValue(for: TestKeys.units) == "imperial")
        #expect(try pair.watch.storedValue(for: TestKeys.token) == nil)
        #expect(try phoneBox.outgoingCount() == 0)

        // Until the phone reads the acknowledgement, the changes stay pending for the watch.
        let watchNode = pair.watch.nodeID
        #expect(try pair.phone.pendingSummary(for: watchNode).automatic == 2)
        let acknowledged = try phone.deliverQueued(through: phoneBox)
        #expect(acknowledged.acknowledged)
        #expect(try pair.phone.pendingSummary(for: watchNode).automatic == 0)
        #expect(try pair.phone.pendingSummary().automatic == 0)

        // The other way too, while the phone is down; nothing is posted twice.
        try await pair.watch.set("analog", for: TestKeys.watchFace)
        try await pair.watch.set(9, for: TestKeys.steps)
        try watch.deliverQueued(through: watchBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try watchBox.outgoingCount() == 1)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 9)
        #expect(try pair.phone.storedValue(for: TestKeys.watchFace) == nil)  // watchOnly: never leaves the watch
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.pendingSummary(for: pair.phone.nodeID).total == 0)
        // Entries that came from the peer are never posted back to it.
        try phone.deliverQueued(through: phoneBox)
        #expect(try phoneBox.outgoingCount() == 0)
    }

    /// A watch whose outbox is full (its reserve too: the phone has not read
    /// for long) still reads and applies what the phone queued; its node
    /// renewal notice, which goes ahead of anything else it posts, waits for
    /// room as its acknowledgements do, and goes first once there is.
    @Test func aWatchWithAFullOutboxStillReadsAndItsNoticeGoesFirstLater() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path,
                                                          limits: MailboxLimits(maxMessages: 2, acknowledgementReserve: 1))
        try await pair.phone.set(3, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        let filler = QueuedMessage.refusal(QueuedHeader(protocolVersion: 1, node: pair.watch.nodeID, role: .watch, pairingEpoch: secret.epoch,
                                                        registryFingerprint: []), code: "test", message: "filler")
        for _ in 0..<3 { try watchBox.post(filler.frame(), reserve: true) }
        let report = try watch.deliverQueued(through: watchBox)
        #expect(report.entriesApplied == 1)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 3)
        #expect(report.failure?.code.rawValue == TransportError.Code.mailboxFull.rawValue, "\(String(describing: report.failure))")
        // The phone reads the fillers (each refusal of nothing it sent); the watch posts again, its notice first.
        _ = try phone.deliverQueued(through: phoneBox)
        _ = try watch.deliverQueued(through: watchBox)
        let kinds = try watchBox.outgoingMessages().map { try QueuedMessage(frame: $0.frame).kindName }
        #expect(kinds.first == "node renewal notice", "\(kinds)")
        #expect(kinds.contains("acknowledgement"), "\(kinds)")
    }

    @Test func aRedeliveredBatchAppliesNothingTwice() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path)
        try await pair.phone.set(["a", "b"], for: TestKeys.tags)
        try await pair.phone.set(3, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        let spool = Mailbox.spool(folder.path, from: .phone)
        let file = spool + "/00000000000000000001.msg"
        let copy = try Data(contentsOf: URL(fileURLWithPath: file))

        let changes = pair.watch.changes()
        #expect(try watch.deliverQueued(through: watchBox).entriesApplied == 2)
        // The watch died after applying, before it recorded the message as taken: it comes again.
        try copy.write(to: URL(fileURLWithPath: file))
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: spool + "/receiver.state"))
        let again = try watch.deliverQueued(through: watchBox)
        #expect(again.messagesRead == 1)
        #expect(again.entriesApplied == 0)
        #expect(again.refused.isEmpty)
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["a", "b"])
        // Two changes (one per key), not four.
        var seen: [String] = []
        for await change in changes {
            seen.append(change.key)
            if seen.count == 2 { break }
        }
        #expect(Set(seen) == ["tags", "health:daily:steps"])
        #expect(pair.watch.syncCounters.entriesReceived == 4)
        // Both acknowledgements reach the phone (after the watch's node renewal notice); the cursor moves once.
        let acks = try phone.deliverQueued(through: phoneBox)
        #expect(acks.messagesRead == 3)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)
    }

    @Test func aRefusedOrLostBatchIsPostedAgainFromTheCursor() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path)
        // The peers know each other first.
        try await pair.watch.set("x", for: TestKeys.watchFace)
        try watch.deliverQueued(through: watchBox)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)

        try await pair.phone.set(1, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        try await pair.phone.set("metric!", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try phoneBox.outgoingCount() == 2)
        // The first message is lost (deleted from the spool).
        let first = try phoneBox.outgoingMessages()[0]
        try FileManager.default.removeItem(atPath: phoneBox.outboxPath + "/" + first.fileName)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.units) == "metric!")
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
        // The acknowledgement of the second does not move the cursor over the first's range;
        // the outbox is empty and the cursor lags: everything after it is posted again, once.
        let again = try phone.deliverQueued(through: phoneBox)
        #expect(!again.acknowledged)
        #expect(again.entriesPosted == 2)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).automatic == 2)
        #expect(try phone.deliverQueued(through: phoneBox).entriesPosted == 0)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 1)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)
    }

    /// A watch and a phone whose registries differ (one app updated first),
    /// with no live session: the side that refuses a message of the other
    /// registry keeps it aside and posts its key declarations; the sender
    /// compares them, answers with its own and posts again. From then on the
    /// keys declared alike flow both ways, and those declared differently wait
    /// (pending), as they do live.
    @Test func registriesThatDifferAreComparedThroughTheMailbox() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, otherSteps, watch, watchBox) = try registriesThatDiffer(pair, folder)
        let events = otherWatch.events()

        try await pair.phone.set(4, for: TestKeys.steps)
        try await pair.phone.set("imperial", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        let refused = try watch.deliverQueued(through: watchBox)
        #expect(refused.refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(refused.entriesApplied == 0)
        #expect(try watchBox.refusedFiles() == ["00000000000000000001.msg"])
        let error = try await first(of: events, "the refusal's error event") { if case .error = $0 { true } else { false } }
        #expect({ if case .error(let refusal) = error { refusal.code == .keyDeclarationMismatch } else { false } }())

        // The phone reads the refusal and the watch's declarations, and posts again: what the watch declares alike.
        let again = try phone.deliverQueued(through: phoneBox)
        #expect(again.refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(try queuedKeys(phoneBox) == ["units"])
        let read = try watch.deliverQueued(through: watchBox)
        #expect(read.refused.map(\.code) == [])
        #expect(read.entriesApplied == 1)
        #expect(try otherWatch.storedValue(for: TestKeys.units) == "imperial")
        #expect(try otherWatch.storedValue(for: otherSteps) == nil)
        let mismatch = try await first(of: events, "the watch's keyMismatch") { if case .keyMismatch = $0 { true } else { false } }
        #expect(mismatch == .keyMismatch(keys: ["health:daily:steps"]))

        // Both ways from now on; steps waits for the watch.
        try await expectTheWatchsChangesArriveAndStepsWaits(pair, phone, phoneBox, otherWatch, watch, watchBox)

        // A change of steps goes on being passed over, in a batch still in the mailbox when the
        // watch app is updated to the phone's registry.
        try await pair.phone.set(7, for: TestKeys.steps)
        try await pair.phone.set("uk", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["units"])
        otherWatch.close()
        let updated = try SyncStore(path: pair.folder.file("other.sqlite"), role: .watch, registry: TestKeys.registry(),
                                    options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("other.key"))))
        let updatedPeer = SyncPeer(store: updated, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let updatedBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        // The updated watch takes that batch; its acknowledgement, written with the phone's registry,
        // moves the phone's cursor past the change of steps it never carried, and tells the phone
        // that the registries agree: what was passed over goes in a repair batch, no live session needed.
        try updatedPeer.deliverQueued(through: updatedBox)
        #expect(try updated.storedValue(for: TestKeys.units) == "uk")
        let repaired = try phone.deliverQueued(through: phoneBox)
        #expect(repaired.refused.map(\.code) == [])
        #expect(try queuedKeys(phoneBox).contains("health:daily:steps"))
        // Lost on the way (as a file that never arrives): posted again once the outbox is empty.
        for message in try phoneBox.outgoingMessages() {
            try FileManager.default.removeItem(atPath: phoneBox.outboxPath + "/" + message.fileName)
        }
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["health:daily:steps"])
        #expect(try updatedPeer.deliverQueued(through: updatedBox).refused.isEmpty)
        #expect(try updated.storedValue(for: TestKeys.steps) == 7)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == false)
        #expect(try pair.phone.peerRecords().first { $0.node == updated.nodeID }?.mismatched == [])
        // Nothing more: no second repair, the cursor goes on.
        try await pair.phone.set("us", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["units"])
        try updatedPeer.deliverQueued(through: updatedBox)
        #expect(try updated.storedValue(for: TestKeys.units) == "us")
    }

    /// A watch the phone forgot (unseen past the horizon) while a batch that
    /// passed over a key it declared differently waited in the mailbox comes
    /// back updated: that batch's acknowledgement moves its new cursor past the
    /// change, and the phone still sends it once the registries agree. Found
    /// by `syncsim fuzz` (seed 3503850): the forgotten record's keys declared
    /// differently were gone, and the change never reached the watch.
    @Test func aForgottenWatchStillGetsWhatWasPassedOverForIt() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, _, _) = try registriesThatDiffer(pair, folder)
        try compareLive(pair, otherWatch)
        try await pair.phone.set(7, for: TestKeys.steps)
        try await pair.phone.set("uk", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["units"])

        try forgetAfterTheHorizon(pair, otherWatch)

        // It comes back updated to the phone's registry, through the mailbox.
        otherWatch.close()
        let updated = try SyncStore(path: pair.folder.file("other.sqlite"), role: .watch, registry: TestKeys.registry(),
                                    options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("other.key"))))
        let updatedPeer = SyncPeer(store: updated, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let updatedBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        for _ in 0..<4 {
            try updatedPeer.deliverQueued(through: updatedBox)
            try phone.deliverQueued(through: phoneBox)
        }
        #expect(try updated.storedValue(for: TestKeys.units) == "uk")
        #expect(try updated.storedValue(for: TestKeys.steps) == 7, "the change passed over for the forgotten watch never came")
        #expect(try pair.phone.peerRecords().first { $0.node == updated.nodeID }?.mismatched == [])
    }

    /// A watch of another registry that the phone compared with its own (a
    /// live session), then forgot (unseen past the horizon), posts a change
    /// of a key declared alike: the phone remembers the comparison and takes
    /// it, with no refusal (the watch, which had retried once already,
    /// would pause a minute). Found by `syncsim fuzz` (seed 5703117).
    @Test func aForgottenWatchOfAnotherRegistryIsNotRefusedForIt() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, watch, watchBox) = try registriesThatDiffer(pair, folder)
        let compared = try compareLive(pair, otherWatch)
        try forgetAfterTheHorizon(pair, otherWatch)

        try await otherWatch.set(["run"], for: TestKeys.tags)
        try watch.deliverQueued(through: watchBox)
        let read = try phone.deliverQueued(through: phoneBox)
        #expect(read.refused.map(\.code) == [])
        #expect(read.entriesApplied == 1)
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["run"])
        let back = try #require(try pair.phone.peerRecords().first { $0.node == otherWatch.nodeID })
        #expect(back.registries == compared.registries)
        #expect(back.mismatched == compared.mismatched)
    }

    /// A watch's queued change that the phone merges (the key has a resolver)
    /// while a live session with that watch runs: the merge is new to the
    /// watch too and goes over the session, and the phone is not idle before
    /// it went. Found over TCP by `syncsim fuzz` (seed 6600892): the session
    /// was not woken by an apply from its own peer, `waitUntilIdle` returned
    /// at once, and the two kept one version with two values.
    @Test func aQueuedChangeMergedDuringALiveSessionGoesBackOverIt() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config)
        let watch = SyncPeer(store: pair.watch, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        let (a, b) = InMemoryConnection.makePair()
        let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        // On a timeout, what each side waits for (the error names only the waiting side's).
        func bothIdle(_ step: String) async throws {
            do {
                try await phone.waitUntilIdle(timeout: waitLimit)
                try await watch.waitUntilIdle(timeout: waitLimit)
            } catch {
                let phoneBlockers = await phone.idleBlockers(), watchBlockers = await watch.idleBlockers()
                Issue.record("\(step): \(error); phone: \(phoneBlockers); watch: \(watchBlockers)")
                throw error
            }
        }
        let outcome = await Result {
            try await pair.phone.set(["a"], for: TestKeys.tags)
            try await bothIdle("after the phone's write")
            #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["a"])
            // Queued by the watch before the session, concurrent with the phone's write.
            let header = QueuedHeader(protocolVersion: config.protocolRange.lowerBound, node: pair.watch.nodeID, role: .watch,
                                      pairingEpoch: secret.epoch, registryFingerprint: pair.watch.registry.fingerprint(for: .watch))
            let older = WireEntry(key: TestKeys.tags.name, version: HLCTimestamp(physicalMilliseconds: 1, counter: 0, node: pair.watch.nodeID),
                                  base: .zero, deleted: false, encoding: "json", value: Array(#"["b"]"#.utf8))
            try watchBox.post(QueuedMessage.batch(header, after: 0, through: 1, entries: [older]).frame())
            #expect(try phone.deliverQueued(through: phoneBox).entriesApplied == 1)
            #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["a", "b"])
            try await bothIdle("after the queued merge")
            #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["a", "b"], "the merge did not reach the watch")
            #expect(try pair.watch.entryInfo(forKey: TestKeys.tags.name)?.version == pair.phone.entryInfo(forKey: TestKeys.tags.name)?.version)
        }
        await a.close()
        for task in tasks { _ = await task.value }
        try outcome.get()
    }

    /// A watch that refuses several messages of a registry it has not
    /// compared, in one pass, refuses each: the phone compares, posts again
    /// once, and does not take the refusals of the older messages for a peer
    /// that still refuses (which would pause posting for a minute). Found by
    /// `syncsim fuzz` (seed 3801334): the watch did not get the phone's changes
    /// at the next checkpoint.
    @Test func severalRefusalsOfMessagesPostedBeforeTheComparisonCostNoPause() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, watch, watchBox) = try registriesThatDiffer(pair, folder)
        for units in ["metric", "imperial", "uk"] {
            try await pair.phone.set(units, for: TestKeys.units)
            try phone.deliverQueued(through: phoneBox)
        }
        #expect(try phoneBox.outgoingCount() == 3)
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == Array(repeating: .keyDeclarationMismatch, count: 3))
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox).contains("units"), "the phone paused instead of posting again")
        try watch.deliverQueued(through: watchBox)
        #expect(try otherWatch.storedValue(for: TestKeys.units) == "uk")
    }

    /// An entry the watch refuses by name because it declares its key
    /// differently (a batch the phone's older app posted right after offering
    /// its declarations) waits as a key declared differently does: once the
    /// phone's app is updated to the watch's registry, it goes. Found by
    /// `syncsim fuzz` (seed 3704189): the acknowledgement moved the cursor
    /// past the refused change, and it never reached the watch.
    @Test func anEntryRefusedForItsDeclarationGoesOnceTheRegistriesAgree() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        // The phone's older app declares steps as a String.
        let olderSteps = Key<String>("steps", in: Namespace("health").child("daily"), default: "", availability: .all, policy: .automaticSmall)
        let older: [any KeyDeclaration] = [olderSteps, TestKeys.name, TestKeys.token, TestKeys.watchFace, TestKeys.units, TestKeys.draft,
                                           TestKeys.blob, TestKeys.tags, TestKeys.secret, TestKeys.daily]
        let path = pair.folder.file("older-phone.sqlite")
        let options = StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("older-phone.key")))
        let olderPhone = try SyncStore(path: path, role: .phone, registry: KeyRegistry(older), options: options)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        let watch = SyncPeer(store: pair.watch, configuration: config)

        try await pair.watch.set(["run"], for: TestKeys.tags)
        try watch.deliverQueued(through: watchBox)
        try await olderPhone.set("4", for: olderSteps)
        // The older phone refuses the watch's message, offers its declarations, and posts steps.
        try SyncPeer(store: olderPhone, configuration: config).deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["health:daily:steps"])
        // The watch compares (the offer comes first), then takes the batch and refuses steps by name.
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.entryInfo(forKey: "health:daily:steps") == nil)

        // The phone's app is updated to the watch's registry before it reads the acknowledgement.
        olderPhone.close()
        let phoneStore = try SyncStore(path: path, role: .phone, registry: TestKeys.registry(), options: options)
        let phone = SyncPeer(store: phoneStore, configuration: config)
        for _ in 0..<3 {
            try phone.deliverQueued(through: phoneBox)
            try watch.deliverQueued(through: watchBox)
        }
        let sent = try #require(try phoneStore.entryInfo(forKey: "health:daily:steps"))
        #expect(try pair.watch.entryInfo(forKey: "health:daily:steps")?.version == sent.version, "the refused change never reached the watch")
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["run"])
        #expect(try phoneStore.storedValue(for: TestKeys.tags) == ["run"])
    }

    /// The watch of `registriesThatDiffer` writes tags: they reach the phone
    /// through the mailbox, acknowledged, while steps (declared differently)
    /// stays pending for the watch, as it does live, and units does not.
    func expectTheWatchsChangesArriveAndStepsWaits(_ pair: Pair, _ phone: SyncPeer, _ phoneBox: Mailbox, _ watchStore: SyncStore,
                                                   _ watch: SyncPeer, _ watchBox: Mailbox,
                                                   sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await watchStore.set(["run"], for: TestKeys.tags)
        try watch.deliverQueued(through: watchBox)
        let back = try phone.deliverQueued(through: phoneBox)
        #expect(back.refused.map(\.code) == [], sourceLocation: sourceLocation)
        #expect(back.acknowledged, sourceLocation: sourceLocation)
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["run"], sourceLocation: sourceLocation)
        #expect(try pair.phone.entryInfo(forKey: "health:daily:steps")?.isPending == true, sourceLocation: sourceLocation)
        #expect(try pair.phone.entryInfo(forKey: "units")?.isPending == false, sourceLocation: sourceLocation)
    }

    /// `pair`'s phone, and a watch store in `pair`'s folder whose registry
    /// declares steps as manual (the other keys as `TestKeys`), each with its
    /// peer and its end of a mailbox in `folder`.
    /// A live session between the phone and `watch` (of another registry) that
    /// compares the two registries, then ends; returns the phone's record of it.
    @discardableResult
    func compareLive(_ pair: Pair, _ watch: SyncStore) throws -> PeerRecord {
        let link = Link(pair.phone, watch, epoch: secret.epoch)
        link.connect()
        link.settle()
        let compared = try #require(try pair.phone.peerRecords().first { $0.node == watch.nodeID })
        #expect(compared.mismatched == ["health:daily:steps"])
        link.a.connectionLost()
        link.b.connectionLost()
        return compared
    }

    /// `watch` stays away past the horizon: the phone forgets it.
    func forgetAfterTheHorizon(_ pair: Pair, _ watch: SyncStore) throws {
        pair.phoneClock.advance(by: 91 * 86_400_000)
        _ = try pair.phone.purgeTombstones()
        #expect(try pair.phone.forgottenPeers() == [watch.nodeID])
    }

    func registriesThatDiffer(_ pair: Pair, _ folder: TempFolder) throws
        -> (phone: SyncPeer, phoneBox: Mailbox, watchStore: SyncStore, watchSteps: Key<Int>, watch: SyncPeer, watchBox: Mailbox) {
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let steps = Key<Int>("steps", in: Namespace("health").child("daily"), default: 0, availability: .all, policy: .manual)
        let keys: [any KeyDeclaration] = [steps, TestKeys.name, TestKeys.token, TestKeys.watchFace, TestKeys.units, TestKeys.draft,
                                          TestKeys.blob, TestKeys.tags, TestKeys.secret, TestKeys.daily]
        let store = try SyncStore(path: pair.folder.file("other.sqlite"), role: .watch, registry: KeyRegistry(keys),
                                  options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("other.key"))))
        return (SyncPeer(store: pair.phone, configuration: config), try Mailbox(directory: folder.path, role: .phone, secret: secret),
                store, steps, SyncPeer(store: store, configuration: config), try Mailbox(directory: folder.path, role: .watch, secret: secret))
    }
}

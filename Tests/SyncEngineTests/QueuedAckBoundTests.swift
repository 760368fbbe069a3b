import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// A queued acknowledgement names the keys its batch refused: bounded so that
/// it always fits a mailbox message, and no key refused for its declaration
/// (which the sender keeps waiting) left out.
@Suite struct QueuedAckBoundTests {
    let secret = PairingSecret.generate()

    /// A batch whose rejections name more than a message may hold (a buggy or
    /// hostile peer's keys that NFC makes three times longer, each refused):
    /// the phone could not post its acknowledgement (`oversized-frame`),
    /// took nothing, and read the batch again every round, so nothing the
    /// watch posted after it ever arrived. The acknowledgement fits now.
    @Test func anAcknowledgementOfManyLongRefusedKeysFitsAMessage() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let limits = MailboxLimits(maxMessageBytes: 64 << 10)
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path, limits: limits)

        try await pair.watch.set(9, for: TestKeys.steps)
        try watch.deliverQueued(through: watchBox)
        let posted = try #require(try watchBox.outgoingMessages().last)
        guard case .batch(let header, _, _, _) = try QueuedMessage(frame: posted.frame) else {
            Issue.record("the watch's message is no batch")
            return
        }
        // 300 unknown keys of 349 bytes, 1,021 in NFC (U+1D160 is three scalars of four bytes in NFC).
        let version = HLCTimestamp(packed: 1 << 30, node: pair.watch.nodeID)
        let entries = (0..<300).map { i in
            WireEntry(key: "junk:" + String(repeating: "\u{1D160}", count: 84) + "\(100 + i)", version: version, base: .zero,
                      deleted: true, encoding: "json", value: nil)
        }
        #expect(KeyName.canonical(entries[0].key).utf8.count == 1_016)
        try watchBox.post(QueuedMessage.batch(header, after: 1 << 20, through: 1 << 20 + 300, entries: entries).frame())
        try await pair.watch.set(10, for: TestKeys.steps)
        try watch.deliverQueued(through: watchBox)

        let read = try phone.deliverQueued(through: phoneBox)
        #expect(read.failure == nil, "\(String(describing: read.failure))")
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 10, "what the watch posted after the batch never arrived")
        #expect(try phoneBox.incomingCount() == 0)
        // Each acknowledgement names at most half a message of rejections, and the watch takes them.
        for message in try phoneBox.outgoingMessages() {
            guard case .ack(_, _, _, _, let rejected) = try QueuedMessage(frame: message.frame) else { continue }
            #expect(rejected.reduce(0) { $0 + $1.key.utf8.count + $1.code.utf8.count + 20 } <= limits.maxMessageBytes / 2)
        }
        let back = try watch.deliverQueued(through: watchBox)
        #expect(back.failure == nil, "\(String(describing: back.failure))")
        #expect(back.refused.isEmpty, "\(back.refused)")
    }

    /// The keys refused for their declaration are all named, over as many
    /// messages as they take, ahead of the acknowledgement that moves the
    /// cursor; the other rejections fill what room is left.
    @Test func keysRefusedForTheirDeclarationAreAllNamedInMessagesThatFit() throws {
        let header = QueuedHeader(protocolVersion: 6, node: 0x2002, role: .watch, pairingEpoch: "epoch", registryFingerprint: [1, 2, 3])
        let mismatch = SyncError.Code.keyDeclarationMismatch.rawValue
        let waiting = (0..<3_000).map { SyncMessage.Rejection(key: "steps:day:d\($0)", code: mismatch) }
        let others = (0..<3_000).map { SyncMessage.Rejection(key: "junk:\($0)", code: SyncError.Code.unknownKey.rawValue) }
        let budget = 8 << 10
        let messages = QueuedMessage.acknowledgements(header, after: 10, through: 20, applied: 7, rejected: zip(others, waiting).flatMap { [$0, $1] },
                                                      maxRejectionBytes: budget)
        #expect(messages.count > 1)
        var named: [String] = []
        for (i, message) in messages.enumerated() {
            #expect(try QueuedMessage(frame: message.frame()) == message)
            guard case .ack(_, let after, let through, let applied, let rejected) = message else {
                Issue.record("not an acknowledgement: \(message)")
                continue
            }
            #expect(rejected.reduce(0) { $0 + $1.key.utf8.count + $1.code.utf8.count + 20 } <= budget)
            if i == messages.count - 1 {
                #expect(after == 10 && through == 20 && applied == 7)
            } else {
                #expect((after, through) == QueuedMessage.rejectionsRange && applied == 0)
                #expect(rejected.allSatisfy { $0.code == mismatch })
            }
            named += rejected.filter { $0.code == mismatch }.map(\.key)
        }
        #expect(named == waiting.map(\.key))
        // What fits in one stays one, as it was.
        let few = Array(waiting.prefix(3) + others.prefix(3))
        #expect(QueuedMessage.acknowledgements(header, after: 10, through: 20, applied: 1, rejected: few, maxRejectionBytes: budget)
            == [.ack(header, after: 10, through: 20, applied: 1, rejected: few)])
    }

    /// Hundreds of entries of a family the phone's older app declares
    /// differently, and among them steps (declared differently too), refused by
    /// the watch: their acknowledgements are split to fit the watch's small
    /// messages, and every one of those entries still reaches the watch once
    /// the phone's app is updated. Cut at the bound instead, as live
    /// acknowledgements are, steps was past the cut: the phone took it as
    /// accepted, and it never reached the watch.
    @Test func everyEntryRefusedForItsDeclarationStillArrivesWhenItsAcknowledgementIsSplit() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let limits = MailboxLimits(maxMessageBytes: 16 << 10)
        var config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        config.maxBatchEntries = 250
        // The phone's older app declares the day family and steps with String values.
        let olderSteps = Key<String>("steps", in: Namespace("health").child("daily"), default: "", availability: .all, policy: .automaticSmall)
        let olderDaily = KeyFamily<String>("day", in: Namespace("steps"), default: "", availability: .all, policy: .automaticSmall)
        let older: [any KeyDeclaration] = [olderSteps, TestKeys.name, TestKeys.token, TestKeys.watchFace, TestKeys.units, TestKeys.draft,
                                           TestKeys.blob, TestKeys.tags, TestKeys.secret, olderDaily]
        let path = pair.folder.file("older-phone.sqlite")
        let options = StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("older-phone.key")))
        let olderPhone = try SyncStore(path: path, role: .phone, registry: KeyRegistry(older), options: options)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret, limits: limits)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret, limits: limits)
        let watch = SyncPeer(store: pair.watch, configuration: config)

        try await pair.watch.set(["run"], for: TestKeys.tags)
        try watch.deliverQueued(through: watchBox)
        let days = (0..<400).map { "d\($0)" }
        for day in days.prefix(200) { try await olderPhone.set("x", for: olderDaily[day]) }
        try await olderPhone.set("4", for: olderSteps)
        for day in days.dropFirst(200) { try await olderPhone.set("x", for: olderDaily[day]) }
        // The older phone refuses the watch's message, offers its declarations, and posts the days.
        #expect(try SyncPeer(store: olderPhone, configuration: config).deliverQueued(through: phoneBox).failure == nil)
        // The watch compares, then refuses every day by its declaration.
        let refusing = try watch.deliverQueued(through: watchBox)
        #expect(refusing.failure == nil, "\(String(describing: refusing.failure))")
        #expect(try pair.watch.entryInfo(forKey: "steps:day:d0") == nil)
        var rejectionMessages = 0
        for message in try watchBox.outgoingMessages() {
            guard case .ack(_, let after, let through, _, let rejected) = try QueuedMessage(frame: message.frame) else { continue }
            #expect(rejected.reduce(0) { $0 + $1.key.utf8.count + $1.code.utf8.count + 20 } <= limits.maxMessageBytes / 2)
            if (after, through) == QueuedMessage.rejectionsRange { rejectionMessages += 1 }
        }
        #expect(rejectionMessages > 0, "no acknowledgement was split")

        // The phone's app is updated to the watch's registry before it reads the acknowledgements.
        olderPhone.close()
        let phoneStore = try SyncStore(path: path, role: .phone, registry: TestKeys.registry(), options: options)
        let phone = SyncPeer(store: phoneStore, configuration: config)
        for _ in 0..<4 {
            #expect(try phone.deliverQueued(through: phoneBox).failure == nil)
            #expect(try watch.deliverQueued(through: watchBox).failure == nil)
        }
        var missing: [String] = []
        for key in days.map({ "steps:day:\($0)" }) + ["health:daily:steps"] {
            let sent = try #require(try phoneStore.entryInfo(forKey: key))
            if try pair.watch.entryInfo(forKey: key)?.version != sent.version { missing.append(key) }
        }
        #expect(missing.isEmpty, "\(missing.count) refused entries never reached the watch: \(missing.prefix(5))")
    }
}

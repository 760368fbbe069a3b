import Foundation
import Testing
@testable import SyncTransport

@Suite struct MailboxTests {
    private func frame(_ text: String, type: UInt8 = 0x10) -> Frame { Frame(type: type, payload: Array(text.utf8)) }

    private func drain(_ mailbox: Mailbox) throws -> (messages: [MailboxMessage], refused: [TransportError]) {
        var messages: [MailboxMessage] = []
        var refused: [TransportError] = []
        while let delivery = try mailbox.next() {
            switch delivery {
            case .message(let message):
                messages.append(message)
                try mailbox.accept(message)
            case .refused(_, let error):
                refused.append(error)
            }
        }
        return (messages, refused)
    }

    #if os(Linux)
    /// A write the device has no room for (`/dev/full` answers `ENOSPC`) is
    /// `storage-full`, so an app can tell its user to free space; other write
    /// failures stay `mailbox-io`.
    @Test func aWriteWithNoRoomIsStorageFull() throws {
        let full = open("/dev/full", O_WRONLY | O_CLOEXEC)
        try #require(full >= 0)
        defer { close(full) }
        let failure = try #require(FileWrite.writeAll(Array(repeating: 7, count: 10_000), to: full))
        #expect(FileWrite.isStorageFull(failure))
        #expect(MailboxFiles.writeError(failure, writing: "phone-to-watch/1.msg").code == .storageFull)
        #expect(MailboxFiles.writeError(EACCES, writing: "phone-to-watch/1.msg").code == .mailboxIO)

        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("filewrite-\(UUID())").path
        #expect(FileManager.default.createFile(atPath: folder, contents: nil))
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = open(folder, O_WRONLY | O_CLOEXEC)
        try #require(file >= 0)
        defer { close(file) }
        #expect(FileWrite.writeAll(Array(repeating: 7, count: 100_000), to: file) == nil)
        #expect((try FileManager.default.attributesOfItem(atPath: folder)[.size] as? Int) == 100_000)
    }
    #endif

    /// `Int.max` as "no limit of the app's own" (as `StoreOptions.maxValueSize`
    /// takes it): opening the mailbox overflowed (twice the message size) and
    /// trapped, and so did posting with the reserve.
    @Test func limitsOfIntMaxMeanNoLimit() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let limits = MailboxLimits(maxMessages: .max, maxBytes: .max, maxMessageBytes: .max, acknowledgementReserve: .max, maxRefusedFiles: .max)
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret, limits: limits)
        try phone.post(frame("one"))
        try phone.post(frame(String(repeating: "two ", count: 1_000)), reserve: true)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        let delivered = try drain(watch)
        #expect(delivered.refused.isEmpty)
        #expect(delivered.messages.map { String(decoding: $0.frame.payload, as: UTF8.self) } == ["one", String(repeating: "two ", count: 1_000)])
    }

    /// Before: negative limits were taken, and `post` refused with "at its
    /// limit of -1 messages / … bytes". Now the mailbox is not made: an
    /// `invalid-configuration` error names every negative field.
    @Test func negativeLimitsAreRefusedWhenTheMailboxIsMade() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let fields: [(String, WritableKeyPath<MailboxLimits, Int>)] = [
            ("maxMessages", \.maxMessages), ("maxBytes", \.maxBytes), ("maxMessageBytes", \.maxMessageBytes),
            ("acknowledgementReserve", \.acknowledgementReserve), ("maxRefusedFiles", \.maxRefusedFiles),
        ]
        for (name, field) in fields {
            var limits = MailboxLimits.default
            limits[keyPath: field] = -1
            let error = expectCode(.invalidConfiguration) { _ = try Mailbox(directory: directory, role: .phone, secret: secret, limits: limits) }
            #expect(error?.message.contains("MailboxLimits.\(name) is -1") == true, "\(String(describing: error))")
            #expect(error?.message.contains("0 or more") == true, "\(String(describing: error))")
        }
        let both = MailboxLimits(maxMessages: -1, maxBytes: .min)
        let error = expectCode(.invalidConfiguration) { _ = try Mailbox(directory: directory, role: .watch, secret: secret, limits: both) }
        #expect(error?.message.contains("maxMessages is -1, MailboxLimits.maxBytes is \(Int.min)") == true, "\(String(describing: error))")
        #expect(TransportError.Code.all.contains(.invalidConfiguration))
        // Zero is a limit (nothing but acknowledgements is posted), not an error.
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret, limits: MailboxLimits(maxMessages: 0, acknowledgementReserve: 1))
        expectCode(.mailboxFull) { try phone.post(frame("change")) }
        try phone.post(frame("acknowledgement"), reserve: true)
    }

    @Test func deliversInOrderWhileEitherSideIsDown() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        // The watch is not running: the phone posts, then goes away.
        do {
            let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
            for text in ["one", "two", "three"] { try phone.post(frame(text)) }
            #expect(try phone.outgoingCount() == 3)
        }
        #expect(FileManager.default.fileExists(atPath: directory + "/phone-to-watch/00000000000000000001.msg"))
        // The watch starts later (the phone is down now) and reads them in order.
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        let first = try drain(watch)
        #expect(first.messages.map { String(decoding: $0.frame.payload, as: UTF8.self) } == ["one", "two", "three"])
        #expect(first.messages.map(\.sequence) == [1, 2, 3])
        #expect(first.refused.isEmpty)
        #expect(watch.acceptedSequence == 3)
        try watch.post(frame("reply"))
        // The phone restarts: its sequence goes on (never reused), it reads the reply.
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        #expect(try phone.post(frame("four")) == 4)
        #expect(try drain(phone).messages.map { String(decoding: $0.frame.payload, as: UTF8.self) } == ["reply"])
        let second = try drain(watch)
        #expect(second.messages.map(\.sequence) == [4])
    }

    /// The sender takes back a message the peer has not taken: the peer
    /// reads the ones around it, in order, and nothing is refused.
    @Test func aWithdrawnMessageIsNeverDelivered() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        for text in ["one", "two", "three"] { try phone.post(frame(text)) }
        let two = try #require(try phone.outgoingMessages().first { $0.frame == frame("two") })
        try phone.withdraw(two)
        #expect(try phone.outgoingCount() == 2)
        let read = try drain(watch)
        #expect(read.messages.map { String(decoding: $0.frame.payload, as: UTF8.self) } == ["one", "three"])
        #expect(read.refused.isEmpty)
    }

    @Test func aMessageStaysAtTheFrontUntilAccepted() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        try phone.post(frame("a"))
        try phone.post(frame("b"))
        guard case .message(let first)? = try watch.next() else { Issue.record("no message"); return }
        // Not accepted (say the process died while applying it): delivered again.
        guard case .message(let again)? = try Mailbox(directory: directory, role: .watch, secret: secret).next() else {
            Issue.record("no message"); return
        }
        #expect(again == first)
        try watch.accept(first)
        guard case .message(let second)? = try watch.next() else { Issue.record("no message"); return }
        #expect(second.frame == frame("b"))
    }

    @Test func aLeftoverTemporaryFileIsNeverDelivered() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("complete"))
        let spool = directory + "/phone-to-watch"
        let whole = try Data(contentsOf: URL(fileURLWithPath: spool + "/00000000000000000001.msg"))
        // A writer that died before its rename leaves a temporary file, whole or torn.
        try whole.write(to: URL(fileURLWithPath: spool + "/.tmp-00000000000000000002.msg-77"))
        try whole.prefix(20).write(to: URL(fileURLWithPath: spool + "/.tmp-00000000000000000003.msg-78"))
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("complete")])
        #expect(drained.refused.isEmpty)
        #expect(try watch.next() == nil)
        #expect(try phone.outgoingCount() == 0)
    }

    /// A writer killed between creating its temporary file and renaming it
    /// (an app the system ends mid-post) left the file for good, up to
    /// `maxMessageBytes` each, counted in no limit: every such kill took that
    /// much of the device's storage. A mailbox opened again removes the
    /// temporary files its end wrote, and leaves the peer's alone.
    @Test func temporaryFilesOfAKilledWriterAreRemovedWhenTheMailboxOpensAgain() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("complete"))
        let outbox = directory + "/phone-to-watch/"
        let inbox = directory + "/watch-to-phone/"
        let ours = [outbox + ".tmp-00000000000000000002.msg-77", outbox + ".tmp-sender.state-12",
                    inbox + ".tmp-receiver.state-5", inbox + "refused/.tmp-00000000000000000009.msg.reason-3"]
        let theirs = [outbox + ".tmp-receiver.state-8", inbox + ".tmp-00000000000000000004.msg-9", inbox + ".tmp-sender.state-4"]
        for path in ours + theirs {
            #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: 4096)))
        }
        // One being written right now (by another Mailbox object of this process) stays.
        let inUse = outbox + ".tmp-00000000000000000003.msg-80"
        let writer = open(inUse, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(writer >= 0)
        defer { close(writer) }
        try #require(flock(writer, LOCK_EX | LOCK_NB) == 0)
        let reopened = try Mailbox(directory: directory, role: .phone, secret: secret)
        for path in ours { #expect(!FileManager.default.fileExists(atPath: path), "\(path) stayed") }
        for path in theirs + [inUse] { #expect(FileManager.default.fileExists(atPath: path), "\(path) was removed") }
        try reopened.post(frame("after"))
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try drain(watch).messages.map(\.frame) == [frame("complete"), frame("after")])
    }

    /// A directory or a FIFO under a message's name: reading the directory
    /// failed at every round (the messages after it never came), and opening
    /// the FIFO waited for a writer forever. Each is set aside as refused.
    @Test func anEntryThatIsNotARegularFileIsRefusedAndTheNextComes() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        for text in ["one", "two", "three"] { try phone.post(frame(text)) }
        let spool = directory + "/phone-to-watch"
        try FileManager.default.removeItem(atPath: spool + "/00000000000000000001.msg")
        try FileManager.default.createDirectory(atPath: spool + "/00000000000000000001.msg", withIntermediateDirectories: false)
        try FileManager.default.removeItem(atPath: spool + "/00000000000000000002.msg")
        try #require(mkfifo(spool + "/00000000000000000002.msg", 0o600) == 0)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("three")])
        #expect(drained.refused.count == 2)
        #expect(drained.refused.allSatisfy { $0.code.rawValue == "not-a-message-file" })
        #expect(try watch.refusedFiles().count == 2)
        #expect(try watch.next() == nil)
    }

    /// A state file damaged to the largest number: the next sequence overflowed
    /// (opening the mailbox trapped). It counts as missing.
    @Test func aStateFileAtTheLargestNumberCountsAsMissing() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        do {
            let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
            try phone.post(frame("before"))
            let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
            #expect(try drain(watch).messages.map(\.frame) == [frame("before")])
        }
        let spool = directory + "/phone-to-watch"
        for state in ["sender.state", "receiver.state"] {
            try Data("18446744073709551615\n".utf8).write(to: URL(fileURLWithPath: spool + "/" + state))
        }
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("after"))
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try drain(watch).messages.map(\.frame) == [frame("after")])
    }

    /// A receiver state at 2^62 (damaged, or written by a hostile peer) made
    /// the phone's next sequence 2^62 + 1, a name the watch refuses as
    /// `not-a-message-file`: delivery stopped for good. No reader writes a
    /// state past 2^61 (no spool gets near it): the reader sets it aside with
    /// a reason and reports it, the sender passes over it, and what the phone
    /// posts still arrives, once each.
    @Test func aReceiverStateNoReaderWritesIsSetAsideAndDeliveryGoesOn() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        try phone.post(frame("one"))
        #expect(try drain(watch).messages.map(\.frame) == [frame("one")])
        let state = directory + "/phone-to-watch/receiver.state"
        for damaged in ["4611686018427387904", "4611686018427387903", "\(UInt64(1) << 61 + 1)"] {
            try Data("\(damaged)\n".utf8).write(to: URL(fileURLWithPath: state))
            // The phone keeps its mailbox, or starts again.
            try phone.post(frame("kept \(damaged)"))
            try Mailbox(directory: directory, role: .phone, secret: secret).post(frame("new \(damaged)"))
            let read = try drain(watch)
            #expect(read.messages.map(\.frame) == [frame("kept \(damaged)"), frame("new \(damaged)")])
            #expect(read.messages.allSatisfy { $0.sequence <= 1 << 61 })
            #expect(read.refused.count == 1)
            #expect(read.refused.first?.message.contains("receiver.state") == true)
            #expect(try watch.refusedFiles().contains { $0.hasPrefix("receiver.state") })
        }
        #expect(try phone.outgoingCount() == 0)
    }

    /// Mailbox objects of one directory and role are one mailbox (an app may
    /// make one each time the system hands it a message): each kept its next
    /// sequence in memory, so one made before another posted wrote its message
    /// under the same sequence and replaced the other's, which was never
    /// delivered. Each post takes the next sequence the spool has not used.
    @Test func twoMailboxObjectsOfOneSpoolNeverReplaceEachOthersMessages() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let first = try Mailbox(directory: directory, role: .phone, secret: secret)
        let second = try Mailbox(directory: directory, role: .phone, secret: secret)
        let one = try first.post(frame("one"))
        let two = try second.post(frame("two"))
        let three = try first.post(frame("three"))
        #expect(one < two && two < three)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try drain(watch).messages.map(\.frame) == [frame("one"), frame("two"), frame("three")])
        // After the watch took them (the spool empty): still past what it accepted.
        let four = try second.post(frame("four"))
        #expect(four > three)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("four")])
        #expect(drained.refused.isEmpty)
    }

    @Test func aReplayedMessageIsRefusedAndKeptAside() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        try phone.post(frame("pay once"))
        let path = directory + "/phone-to-watch/00000000000000000001.msg"
        let copy = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(try drain(watch).messages.count == 1)
        // The same file put back: at or below the accepted sequence.
        try copy.write(to: URL(fileURLWithPath: path))
        let replayed = try drain(watch)
        #expect(replayed.messages.isEmpty)
        #expect(replayed.refused.map(\.code) == [.replayedMessage])
        #expect(try watch.refusedFiles() == ["00000000000000000001.msg"])
        let reason = try String(contentsOfFile: directory + "/phone-to-watch/refused/00000000000000000001.msg.reason", encoding: .utf8)
        #expect(reason.hasPrefix("replayed-message"))
        // Also after the watch restarts (the accepted sequence is on disk).
        try copy.write(to: URL(fileURLWithPath: path))
        let restarted = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try drain(restarted).refused.map(\.code) == [.replayedMessage])
    }

    /// A peer that keeps sending what this side refuses (a replay here) cannot
    /// fill the disk: `refused/` keeps the newest `maxRefusedFiles` files, each
    /// with its reason, and within `maxBytes`.
    @Test func refusedFilesAreBoundedAndKeepTheLatest() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let limits = MailboxLimits(maxBytes: 64 << 10, maxRefusedFiles: 5)
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret, limits: limits)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        try phone.post(frame("pay once"))
        let path = directory + "/phone-to-watch/00000000000000000001.msg"
        let copy = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(try drain(watch).messages.count == 1)
        for _ in 0..<12 {
            try copy.write(to: URL(fileURLWithPath: path))
            #expect(try drain(watch).refused.map(\.code) == [.replayedMessage])
        }
        let refusedFolder = directory + "/phone-to-watch/refused/"
        #expect(try watch.refusedFiles().count == 5)
        let all = try FileManager.default.contentsOfDirectory(atPath: refusedFolder)
        #expect(all.filter { $0.hasSuffix(".reason") }.count == 5)

        // By bytes too: files of 20 KB within 64 KB; the one just refused always stays.
        let big = directory + "/phone-to-watch/00000000000000000002.msg"
        for i in 0..<4 {
            try Data(repeating: UInt8(i + 1), count: 20 << 10).write(to: URL(fileURLWithPath: big))
            #expect(try drain(watch).refused.count == 1)
            let contents = try watch.refusedFiles().map { try Data(contentsOf: URL(fileURLWithPath: refusedFolder + $0)) }
            #expect(contents.reduce(0) { $0 + $1.count } <= 64 << 10)
            #expect(contents.contains(Data(repeating: UInt8(i + 1), count: 20 << 10)))
            #expect(contents.count <= 5)
        }
    }

    @Test func messagesOfAnotherPairingOrAlteredAreRefusedAndKept() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let stranger = try Mailbox(directory: directory, role: .phone, secret: PairingSecret.generate())
        try stranger.post(frame("from another pairing"))
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        #expect(try phone.post(frame("tampered")) == 2)
        #expect(try phone.post(frame("renamed")) == 3)
        #expect(try phone.post(frame("good")) == 4)
        let spool = directory + "/phone-to-watch/"
        var tampered = try [UInt8](Data(contentsOf: URL(fileURLWithPath: spool + "00000000000000000002.msg")))
        tampered[tampered.count - 1] ^= 0x01
        try Data(tampered).write(to: URL(fileURLWithPath: spool + "00000000000000000002.msg"))
        try FileManager.default.moveItem(atPath: spool + "00000000000000000003.msg", toPath: spool + "00000000000000000005.msg")
        // The watch reads with the right secret: the good one arrives, the others are kept aside with their reasons.
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("good")])
        #expect(drained.refused.map(\.code) == [.authenticationFailed, .checksumMismatch, .authenticationFailed])
        #expect(drained.refused.first?.message.contains("another pairing") == true)
        #expect(try watch.refusedFiles() == ["00000000000000000001.msg", "00000000000000000002.msg", "00000000000000000005.msg"])
        // A message from the watch's own direction is refused by the phone too (sealed for the other way).
        let watchSpool = directory + "/watch-to-phone/"
        let wrongWay = try phone.post(frame("wrong way"))
        try FileManager.default.moveItem(atPath: spool + Mailbox.fileName(wrongWay), toPath: watchSpool + "00000000000000000001.msg")
        #expect(try drain(phone).refused.map(\.code) == [.authenticationFailed])
    }

    @Test func anAlteredSealIsRefused() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame(String(repeating: "x", count: 40)))
        let path = directory + "/phone-to-watch/00000000000000000001.msg"
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        // Flip a payload byte and fix the envelope's CRC, so only the seal can notice.
        let envelopeStart = Mailbox.headerSize
        bytes[bytes.count - 1] ^= 0x01
        let payload = Array(bytes[(envelopeStart + FrameEnvelope.headerSize)...])
        let crc = Checksum.crc32(payload)
        bytes[envelopeStart + 9] = UInt8(crc >> 24)
        bytes[envelopeStart + 10] = UInt8(truncatingIfNeeded: crc >> 16)
        bytes[envelopeStart + 11] = UInt8(truncatingIfNeeded: crc >> 8)
        bytes[envelopeStart + 12] = UInt8(truncatingIfNeeded: crc)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try drain(watch).refused.map(\.code) == [.decryptionFailed])
        #expect(try watch.refusedFiles() == ["00000000000000000001.msg"])
    }

    @Test func aFullSpoolRefusesWithAClearError() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let limits = MailboxLimits(maxMessages: 2, maxBytes: 1 << 20, maxMessageBytes: 4096, acknowledgementReserve: 1)
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret, limits: limits)
        try phone.post(frame("1"))
        try phone.post(frame("2"))
        let full = expectCode(.mailboxFull) { try phone.post(frame("3")) }
        #expect(full?.message.contains("phone-to-watch mailbox holds 2 messages") == true)
        #expect(try phone.outgoingCount() == 2)
        // An acknowledgement may use the reserve, once.
        try phone.post(frame("ack"), reserve: true)
        expectCode(.mailboxFull) { try phone.post(frame("ack 2"), reserve: true) }
        // A message over the per-message bound is refused on its own.
        expectCode(.oversizedFrame) {
            try phone.post(Frame(type: 0x10, payload: (0..<8000).map { _ in UInt8.random(in: 0...255) }))
        }
        // Once the watch reads, there is room again; nothing was lost or posted twice.
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        #expect(try drain(watch).messages.map(\.frame) == [frame("1"), frame("2"), frame("ack")])
        try phone.post(frame("3"))
        #expect(try drain(watch).messages.map(\.frame) == [frame("3")])
        // The byte bound too.
        let small = MailboxLimits(maxMessages: 100, maxBytes: 300, maxMessageBytes: 4096, acknowledgementReserve: 0)
        let bytesBound = try Mailbox(directory: try temporaryDirectory(), role: .watch, secret: secret, limits: small)
        try bytesBound.post(frame(String(repeating: "a", count: 100)))
        expectCode(.mailboxFull) { try bytesBound.post(frame(String(repeating: "b", count: 200))) }
    }
}

import Foundation
import Testing
@testable import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// Files a buggy or hostile peer can put in the shared folder: names no
/// sender writes, and times no clock gives. Each is refused or passed over;
/// none traps, and the real messages still come in order.
@Suite struct MailboxHostileFileTests {
    private func frame(_ text: String) -> Frame { Frame(type: 0x10, payload: Array(text.utf8)) }

    private func drain(_ mailbox: Mailbox) throws -> (messages: [MailboxMessage], refused: [(name: String, error: TransportError)]) {
        var messages: [MailboxMessage] = []
        var refused: [(String, TransportError)] = []
        while let delivery = try mailbox.next() {
            switch delivery {
            case .message(let message):
                messages.append(message)
                try mailbox.accept(message)
            case .refused(let name, let error):
                refused.append((name, error))
            }
        }
        return (messages, refused)
    }

    /// `1.msg` read as sequence 1 made `next()` look for
    /// `00000000000000000001.msg`, find none, and call itself until the stack
    /// overflowed. Names a sender never writes are refused now.
    @Test func namesNoSenderWritesAreRefusedAndTheMessagesStillCome() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("one"))
        try phone.post(frame("two"))
        let spool = directory + "/phone-to-watch/"
        let misnamed = ["1.msg", "+1.msg", "0001.msg", "00000000000000000000.msg", "18446744073709551615.msg",
                        "04611686018427387905.msg", "0000000000000000000a.msg", " 0000000000000000003.msg"]
        for name in misnamed {
            #expect(FileManager.default.createFile(atPath: spool + name, contents: Data([1, 2, 3])))
        }
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try watch.incomingCount() == 2)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("one"), frame("two")])
        #expect(Set(drained.refused.map(\.name)) == Set(misnamed))
        #expect(drained.refused.allSatisfy { $0.error.code == .notAMessageFile })
        #expect(try watch.next() == nil)
        #expect(watch.acceptedSequence == 2)
        // The largest sequence a name may carry is still a message's.
        #expect(MailboxFiles.sequence(ofMessageNamed: Mailbox.fileName(MailboxFiles.maxSequence)) == MailboxFiles.maxSequence)
    }

    /// A file named for the largest 64-bit sequence in this side's own spool
    /// made opening the mailbox trap (the next sequence overflowed). It is
    /// passed over; the peer refuses it.
    @Test func anOwnSpoolFileOfTheLargestSequenceIsPassedOver() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        _ = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(FileManager.default.createFile(atPath: directory + "/watch-to-phone/18446744073709551615.msg", contents: Data([1])))
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        #expect(try watch.post(frame("after")) == 1)
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let drained = try drain(phone)
        #expect(drained.messages.map(\.frame) == [frame("after")])
        #expect(drained.refused.map(\.error.code) == [.notAMessageFile])
    }

    /// A refused file dated past the year 2262 (a `rename` keeps its time)
    /// overflowed the nanoseconds `refused/`'s pruning sorted by, at the next refusal.
    @Test func aRefusedFileFromTheFarFutureIsPrunedWithoutTrapping() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let limits = MailboxLimits(maxRefusedFiles: 2)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        let spool = directory + "/phone-to-watch/"
        for sequence: UInt64 in 1...4 {
            let path = spool + Mailbox.fileName(sequence)
            #expect(FileManager.default.createFile(atPath: path, contents: Data([0xDE, 0xAD])))
            if sequence == 1 {
                var times = [timespec(tv_sec: 10_000_000_000, tv_nsec: 0), timespec(tv_sec: 10_000_000_000, tv_nsec: 0)]
                try #require(utimensat(AT_FDCWD, path, &times, 0) == 0)
            }
            let drained = try drain(watch)
            #expect(drained.refused.map(\.name) == [Mailbox.fileName(sequence)])
        }
        // Two kept: the last one refused, and the one dated latest.
        #expect(try watch.refusedFiles() == [Mailbox.fileName(1), Mailbox.fileName(4)])
    }

    /// A UNIX-domain socket bound under a message's name: `open` fails on it
    /// (`ENXIO`), so `next()` threw `mailbox-io` at every call and the
    /// messages after it never came. It is set aside as refused.
    @Test func aSocketUnderAMessageNameIsRefusedAndTheNextComes() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("one"))
        try phone.post(frame("two"))
        let path = directory + "/phone-to-watch/" + Mailbox.fileName(1)
        try FileManager.default.removeItem(atPath: path)
        let socketDescriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socketDescriptor >= 0)
        defer { close(socketDescriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        try #require(pathBytes.count < MemoryLayout.size(ofValue: address.sun_path))
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: pathBytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        try #require(bound == 0)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        let drained = try drain(watch)
        #expect(drained.messages.map(\.frame) == [frame("two")])
        #expect(drained.refused.map(\.name) == [Mailbox.fileName(1)])
        #expect(drained.refused.allSatisfy { $0.error.code == .notAMessageFile })
        #expect(try watch.refusedFiles() == [Mailbox.fileName(1)])
        #expect(try watch.next() == nil)
    }

    /// The peer owns the inbox spool, so it can make its `refused/` a symbolic
    /// link to a folder of ours: refusing its next file then moved it there and
    /// pruned that folder down to `maxRefusedFiles`, deleting our files. (A
    /// `refused/` removed, or a dangling link, made every refusal fail with
    /// `mailbox-io`, and the messages after it never came.) The link is
    /// replaced by a real folder; what it pointed to is left alone.
    @Test func aRefusedFolderThatIsALinkIsReplacedAndItsTargetLeftAlone() throws {
        let directory = try temporaryDirectory()
        let outside = try temporaryDirectory()
        let ours = (1...5).map { "document-\($0).txt" }
        for name in ours { #expect(FileManager.default.createFile(atPath: outside + "/" + name, contents: Data("ours".utf8))) }
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: MailboxLimits(maxRefusedFiles: 2))
        let refused = directory + "/phone-to-watch/refused"
        /// A message the watch refuses (its seal broken), then one it takes.
        func postBadThenGood(_ text: String) throws -> UInt64 {
            let bad = try phone.post(frame("bad"))
            #expect(FileManager.default.createFile(atPath: directory + "/phone-to-watch/" + Mailbox.fileName(bad), contents: Data([0xDE, 0xAD])))
            try phone.post(frame(text))
            return bad
        }
        func isRealDirectory(_ path: String) throws -> Bool {
            try FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType == .typeDirectory
        }
        for damage in ["a link to our folder", "removed", "a dangling link"] {
            try FileManager.default.removeItem(atPath: refused)
            switch damage {
            case "a link to our folder": try FileManager.default.createSymbolicLink(atPath: refused, withDestinationPath: outside)
            case "a dangling link": try FileManager.default.createSymbolicLink(atPath: refused, withDestinationPath: outside + "/missing")
            default: break
            }
            let bad = try postBadThenGood(damage)
            let drained = try drain(watch)
            #expect(drained.refused.map(\.name) == [Mailbox.fileName(bad)], "refused/ \(damage)")
            #expect(drained.messages.map(\.frame) == [frame(damage)], "refused/ \(damage)")
            #expect(try isRealDirectory(refused), "refused/ \(damage)")
            #expect(try watch.refusedFiles() == [Mailbox.fileName(bad)], "refused/ \(damage)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside).sorted() == ours, "refused/ \(damage)")
        }
    }

    /// The peer owns its spool, so it can replace the whole folder with a
    /// symbolic link to a folder of ours: reading then refused our `.msg`
    /// files into it, wrote `receiver.state` there and pruned its `refused/`
    /// (our files) down to `maxRefusedFiles`; posting wrote our messages
    /// there. A spool that is a link is replaced by a real, empty folder (what
    /// it pointed to is left alone), and the messages posted after it come.
    @Test func aSpoolFolderThatIsALinkIsReplacedAndItsTargetLeftAlone() throws {
        let directory = try temporaryDirectory()
        let outside = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let limits = MailboxLimits(maxRefusedFiles: 2)
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        try FileManager.default.createDirectory(atPath: outside + "/refused", withIntermediateDirectories: true)
        let ours = ["notes.msg", Mailbox.fileName(1), "refused/a.txt", "refused/b.txt", "refused/c.txt", "refused/d.txt"]
        for name in ours { #expect(FileManager.default.createFile(atPath: outside + "/" + name, contents: Data("ours".utf8))) }
        func untouched() throws -> Bool {
            try FileManager.default.subpathsOfDirectory(atPath: outside).sorted() == (ours + ["refused"]).sorted()
                && ours.allSatisfy { FileManager.default.contents(atPath: outside + "/" + $0) == Data("ours".utf8) }
        }
        func isRealDirectory(_ path: String) throws -> Bool {
            try FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType == .typeDirectory
        }
        // The watch's inbox (the phone's spool) made a link to a folder of the watch's.
        let inbox = directory + "/phone-to-watch"
        try FileManager.default.removeItem(atPath: inbox)
        try FileManager.default.createSymbolicLink(atPath: inbox, withDestinationPath: outside)
        let drained = try drain(watch)
        #expect(drained.messages.isEmpty)
        #expect(drained.refused.isEmpty)
        #expect(try untouched())
        #expect(try isRealDirectory(inbox))
        try phone.post(frame("after"))
        #expect(try drain(watch).messages.map(\.frame) == [frame("after")])
        #expect(try untouched())
        // The phone's inbox (the watch's spool) made a link too: the phone's posts do not follow it either.
        let phoneInbox = directory + "/watch-to-phone"
        try FileManager.default.removeItem(atPath: phoneInbox)
        try FileManager.default.createSymbolicLink(atPath: phoneInbox, withDestinationPath: outside)
        try watch.post(frame("back"))
        #expect(try untouched())
        #expect(try isRealDirectory(phoneInbox))
        #expect(try drain(phone).messages.map(\.frame) == [frame("back")])
        #expect(try untouched())
        // A link at a spool when a mailbox is opened, too.
        try FileManager.default.removeItem(atPath: inbox)
        try FileManager.default.createSymbolicLink(atPath: inbox, withDestinationPath: outside)
        _ = try Mailbox(directory: directory, role: .watch, secret: secret, limits: limits)
        #expect(try untouched())
        #expect(try isRealDirectory(inbox))
    }

    /// A regular file or a FIFO where the inbox's `refused/` folder (or the
    /// whole spool) should be: every refusal threw `mailbox-io` ("not a
    /// folder"), so the first message refused stopped the queue for good.
    /// Whatever the peer put in the folder's place goes (never followed), a
    /// real folder is made, and the messages after the refused one come.
    @Test func aFileWhereASpoolFolderShouldBeIsReplacedAndTheQueueGoesOn() throws {
        let secret = PairingSecret.generate()
        for (what, place) in [("a file", "refused"), ("a FIFO", "refused"), ("a file", "spool")] {
            let directory = try temporaryDirectory()
            let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
            let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
            let path = directory + "/phone-to-watch" + (place == "refused" ? "/refused" : "")
            try FileManager.default.removeItem(atPath: path)
            if what == "a FIFO" {
                try #require(mkfifo(path, 0o600) == 0)
            } else {
                #expect(FileManager.default.createFile(atPath: path, contents: Data("junk".utf8)))
            }
            if place == "spool" {
                #expect(try watch.next() == nil, "\(what) at the \(place)")
            }
            let bad = try phone.post(frame("bad"))
            #expect(FileManager.default.createFile(atPath: directory + "/phone-to-watch/" + Mailbox.fileName(bad), contents: Data([0xDE, 0xAD])))
            try phone.post(frame("good"))
            let drained = try drain(watch)
            #expect(drained.refused.map(\.name) == [Mailbox.fileName(bad)], "\(what) at the \(place)")
            #expect(drained.messages.map(\.frame) == [frame("good")], "\(what) at the \(place)")
            #expect(try watch.refusedFiles() == [Mailbox.fileName(bad)], "\(what) at the \(place)")
        }
    }

    /// Sizes add up without overflow, however large a file system says a file is.
    @Test func spoolSizesSaturateInsteadOfOverflowing() {
        #expect(MailboxFiles.saturatingSum(Int.max - 1, 5) == Int.max)
        #expect(MailboxFiles.saturatingSum(40, 2) == 42)
    }
}

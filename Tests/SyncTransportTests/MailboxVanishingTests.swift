import Foundation
import Testing
@testable import SyncTransport

/// A message the sender withdraws (or that disappears otherwise) after the
/// reader listed the inbox, but before it opened or moved it aside, is
/// passed over as if never listed: the reader goes on with the next one.
@Suite struct MailboxVanishingTests {
    private func frame(_ text: String) -> Frame { Frame(type: 0x10, payload: Array(text.utf8)) }
    private func text(_ delivery: MailboxDelivery?) -> String? {
        guard case .message(let message)? = delivery else { return nil }
        return String(decoding: message.frame.payload, as: UTF8.self)
    }

    @Test func aMessageGoneBeforeItIsOpenedIsPassedOver() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        for text in ["one", "two", "three"] { try phone.post(frame(text)) }
        let one = try #require(try phone.outgoingMessages().first)
        // The phone withdraws "one" after the watch saw it was there, before the watch opens it.
        watch.beforeTakingHook.withLock { hook in
            hook = { name in if name == one.fileName { try? phone.withdraw(one) } }
        }
        let first = try watch.next()
        #expect(text(first) == "two")
        guard case .message(let two)? = first else { return }
        try watch.accept(two)
        #expect(text(try watch.next()) == "three")
        #expect(try watch.refusedFiles().isEmpty)
    }

    @Test func aReplayGoneBeforeItIsMovedAsideIsPassedOver() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        try phone.post(frame("one"))
        let path = Mailbox.spool(directory, from: .phone) + "/" + Mailbox.fileName(1)
        let copy = try Data(contentsOf: URL(fileURLWithPath: path))
        guard case .message(let one)? = try watch.next() else { Issue.record("no message"); return }
        try watch.accept(one)
        // A copy of message 1 comes back (a replay), and goes again before the watch moves it aside.
        try copy.write(to: URL(fileURLWithPath: path))
        try phone.post(frame("two"))
        watch.beforeTakingHook.withLock { hook in
            hook = { name in if name == Mailbox.fileName(1) { unlink(path) } }
        }
        #expect(text(try watch.next()) == "two")
        #expect(try watch.refusedFiles().isEmpty)
        let refused = Mailbox.spool(directory, from: .phone) + "/refused"
        #expect(try FileManager.default.contentsOfDirectory(atPath: refused).isEmpty, "no .reason left for a file never moved")
    }
}

/// A mailbox directory removed while its `Mailbox` objects are in use (the
/// app's shared folder cleaned up, a reset), then used again.
@Suite struct MailboxDirectoryRemovedTests {
    /// Before: once the directory was removed, every `post` and `next` of the
    /// `Mailbox` objects made before threw `mailbox-io` ("cannot read the
    /// mailbox directory …: No such file or directory") for as long as they
    /// lived (`runQueued` never delivered again), though making a `Mailbox`
    /// creates what is missing.
    @Test func aRemovedDirectoryIsMadeAgainByTheMailboxesInUse() throws {
        let directory = try temporaryDirectory() + "/mailbox"
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        try phone.post(Frame(type: 0x10, payload: [1]))
        guard case .message(let first)? = try watch.next() else { Issue.record("the first message was not delivered"); return }
        try watch.accept(first)

        try FileManager.default.removeItem(atPath: directory)
        #expect(try watch.next() == nil)
        let sequence = try phone.post(Frame(type: 0x10, payload: [2]))
        #expect(sequence > first.sequence)
        guard case .message(let second)? = try watch.next() else { Issue.record("the message posted after the removal was not delivered"); return }
        #expect(second.frame.payload == [2])
        try watch.accept(second)
        #expect(try watch.next() == nil)
    }
}

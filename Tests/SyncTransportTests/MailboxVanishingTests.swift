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

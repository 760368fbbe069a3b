import Foundation
import Testing
@testable import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// A message file the reader cannot open made `next()` throw `mailbox-io`
/// every round, so the messages behind it never came. It is set aside in
/// `refused/` (with its reason) and the queue goes on.
@Suite struct MailboxUnreadableMessageTests {
    private func frame(_ text: String) -> Frame { Frame(type: 0x10, payload: Array(text.utf8)) }

    @Test func aMessageThatCannotBeOpenedIsSetAsideAndTheNextComes() throws {
        let directory = try temporaryDirectory()
        let secret = PairingSecret.generate()
        let phone = try Mailbox(directory: directory, role: .phone, secret: secret)
        try phone.post(frame("one"))
        try phone.post(frame("two"))
        // A write lease held on the first message: every non-blocking open of it by another
        // description fails (EWOULDBLOCK), as root too. The lease break's SIGIO is ignored, for
        // good: a thread that blocks it keeps it pending, and a default action restored would end the process.
        signal(SIGIO, SIG_IGN)
        let holder = open(directory + "/phone-to-watch/" + Mailbox.fileName(1), O_RDONLY)
        try #require(holder >= 0)
        defer { close(holder) }
        let setLease: Int32 = 1024  // F_SETLEASE
        try #require(fcntl(holder, setLease, Int32(F_WRLCK)) == 0)

        let watch = try Mailbox(directory: directory, role: .watch, secret: secret)
        guard case .refused(let name, let error)? = try watch.next() else {
            Issue.record("the unreadable message was not refused")
            return
        }
        #expect(name == Mailbox.fileName(1))
        #expect(error.code == .mailboxIO)
        #expect(String(describing: error).contains(Mailbox.fileName(1)))
        guard case .message(let message)? = try watch.next() else {
            Issue.record("the message behind the unreadable one did not come")
            return
        }
        #expect(message.frame == frame("two"))
        try watch.accept(message)
        #expect(try watch.next() == nil)
        #expect(try watch.refusedFiles() == [Mailbox.fileName(1)], "the unreadable file is kept aside, not deleted")
    }
}

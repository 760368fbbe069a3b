import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// An app may make a `Mailbox` each time the system hands it a message (a
/// `WCSession` delegate callback) rather than keep one: the rounds through
/// mailboxes of one directory are one mailbox's rounds. Before, each new
/// object got a queued-delivery driver of its own, kept for the life of the
/// peer (one more per round, each with the mailbox it held).
@Suite struct MailboxPerRoundTests {
    @Test func aMailboxMadeForEachRoundIsOneMailbox() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let queued = QueuedDeliveryTests()
        let (phone, _, watch, _) = try queued.peers(pair, directory: folder.path)
        let secret = queued.secret
        var posted = 0
        for round in 1...20 {
            try await pair.phone.set(round, for: TestKeys.steps)
            posted += try phone.deliverQueued(through: Mailbox(directory: folder.path, role: .phone, secret: secret)).messagesPosted
            try watch.deliverQueued(through: Mailbox(directory: folder.path, role: .watch, secret: secret))
        }
        try phone.deliverQueued(through: Mailbox(directory: folder.path, role: .phone, secret: secret))
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 20)
        #expect(posted == 20, "one batch per round")
        #expect(phone.queuedDrivers.withLock { $0.count } == 1)
        #expect(watch.queuedDrivers.withLock { $0.count } == 1)
        #expect(try pair.phone.pendingSummary().automatic == 0)
    }
}

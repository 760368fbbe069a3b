import Foundation
import Logging
@testable import SyncEngine
@testable import SyncTransport
import Testing

/// Records what a `MailboxReplicator` reports, on the round's own thread.
private final class RecordingReporter: ReplicationReporter {
    var errors: [SyncError] = []
    let logger = Logger(label: "same-role-mailbox-test")
    var wantsProgress: Bool { false }
    func report(_ event: SyncEvent, peer: UInt32?) { if case .error(let error) = event { errors.append(error) } }
    func count(_ delta: SyncCounters) {}
}

/// Two ends of one mailbox opened with one role (two phones) each read only
/// the other role's spool: both post to one spool no one reads. Each reports
/// it once (an `.error` naming the role and the fix), and nothing is taken.
@Suite struct SameRoleMailboxTests {
    let secret = PairingSecret.generate()

    private func replicator(_ store: SyncStore, _ mailbox: Mailbox) -> (MailboxReplicator, RecordingReporter) {
        let reporter = RecordingReporter()
        let replicator = MailboxReplicator(port: SQLiteReplicationPort(store), reporter: reporter,
                                           configuration: ReplicationConfiguration(pairingEpoch: secret.epoch), mailbox: mailbox)
        return (replicator, reporter)
    }

    @Test func twoPhonesOnOneMailboxEachReportTheRoleOnceAndKeepEveryMessage() async throws {
        let pair = try Pair()
        let otherPhone = try SyncStore(path: pair.folder.file("phone2.sqlite"), role: .phone, registry: TestKeys.registry(),
                                       options: StoreOptions(clock: ManualClock(), encryption: .keyFile(path: pair.folder.file("phone2.key"))))
        let folder = TempFolder()
        let (a, aReports) = replicator(pair.phone, try Mailbox(directory: folder.path, role: .phone, secret: secret))
        let (b, bReports) = replicator(otherPhone, try Mailbox(directory: folder.path, role: .phone, secret: secret))
        var posted = 0
        try await pair.phone.set(1, for: TestKeys.steps)
        posted += a.exchange(sendsPending: true).messagesPosted
        try await otherPhone.set(2, for: TestKeys.steps)
        posted += b.exchange(sendsPending: true).messagesPosted
        posted += a.exchange(sendsPending: true).messagesPosted
        try await pair.phone.set(3, for: TestKeys.steps)
        posted += a.exchange(sendsPending: true).messagesPosted
        posted += b.exchange(sendsPending: true).messagesPosted
        for _ in 1...3 {  // further rounds report nothing new
            posted += a.exchange(sendsPending: true).messagesPosted
            posted += b.exchange(sendsPending: true).messagesPosted
        }
        for (reports, other) in [(aReports, otherPhone.nodeID), (bReports, pair.phone.nodeID)] {
            let sameRole = reports.errors.filter { $0.message.contains("also a phone") }
            #expect(sameRole.count == 1, "once, not each round: \(reports.errors)")
            let message = try #require(sameRole.first).message
            #expect(message.contains("a phone pairs only with a watch"))
            #expect(message.contains(String(other, radix: 16)))
            #expect(message.contains("open one end of the mailbox as .phone and the other as .watch"))
        }
        // Nothing was taken: every message waits for a watch to read it.
        #expect(posted >= 3)
        #expect(try Mailbox(directory: folder.path, role: .phone, secret: secret).outgoingCount() == posted)
        withExtendedLifetime(folder) {}
    }

    @Test func aPhoneAndAWatchOnAMailboxStillSyncAndReportNoRole() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        let (phone, phoneReports) = replicator(pair.phone, phoneBox)
        let (watch, watchReports) = replicator(pair.watch, watchBox)
        try await pair.phone.set(7, for: TestKeys.steps)
        try await pair.watch.set(["from the watch"], for: TestKeys.tags)
        // Two rounds of the phone before the watch reads: its second finds its first's messages waiting.
        #expect(phone.exchange(sendsPending: true).failure == nil)
        #expect(try phoneBox.outgoingCount() > 0)
        for _ in 1...3 {
            #expect(phone.exchange(sendsPending: true).failure == nil)
            #expect(watch.exchange(sendsPending: true).failure == nil)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 7)
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["from the watch"])
        #expect(phoneReports.errors.isEmpty && watchReports.errors.isEmpty, "\(phoneReports.errors) \(watchReports.errors)")
        // The check never opens what this end posted itself (a batch may be megabytes to decrypt and parse).
        #expect(phone.sameRole.opened == 0 && watch.sameRole.opened == 0, "\(phone.sameRole.opened) \(watch.sameRole.opened)")
        withExtendedLifetime(folder) {}
    }
}

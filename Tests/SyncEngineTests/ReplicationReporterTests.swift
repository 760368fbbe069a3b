import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// Events and counters belong to the session's driver: the store port never counts or publishes them.
@Suite struct ReplicationReporterTests {
    @Test func countersAndEventsGoToTheDriversReporterNotThroughThePort() async throws {
        let pair = try Pair()
        try await pair.phone.set(42, for: TestKeys.steps)
        try await pair.phone.set(["a"], for: TestKeys.tags)
        try await pair.watch.set(["b"], for: TestKeys.tags)
        let phoneReports = RecordingReporter(), watchReports = RecordingReporter()
        let config = ReplicationConfiguration(pairingEpoch: "reporter")
        let phone = ReplicationEndpoint(port: SQLiteReplicationPort(pair.phone), reporter: phoneReports, configuration: config)
        let watch = ReplicationEndpoint(port: SQLiteReplicationPort(pair.watch), reporter: watchReports, configuration: config)
        var toWatch = phone.start(now: 0), toPhone = watch.start(now: 0)
        for _ in 0..<100 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let (a, b) = (toWatch, toPhone)
            toWatch = b.flatMap { phone.receive($0, now: 0) }
            toPhone = a.flatMap { watch.receive($0, now: 0) }
        }
        #expect(phone.isIdle && watch.isIdle)
        #expect(try await pair.watch.get(TestKeys.steps) == 42)
        #expect(try await pair.watch.get(TestKeys.tags) == ["a", "b"])

        #expect(phoneReports.counters.sessions == 1 && watchReports.counters.sessions == 1)
        #expect(phoneReports.counters.entriesSent >= 2)
        #expect(watchReports.counters.entriesReceived >= 2)
        #expect(phoneReports.counters.conflicts + watchReports.counters.conflicts >= 1)
        #expect(watchReports.events.contains { if case .connected(pair.phone.nodeID, .phone) = $0.event { $0.peer == pair.phone.nodeID } else { false } })
        #expect(watchReports.events.contains { if case .received(_, let applied) = $0.event { applied > 0 } else { false } })
        // The stores' own counters saw none of it: the port only reads and writes.
        #expect(pair.phone.syncCounters == SyncCounters())
        #expect(pair.watch.syncCounters == SyncCounters())
    }
}

import Foundation
import SyncEngine
@testable import SyncSim
import Testing

/// `syncsim node` prints every event as a JSON line: each must be a valid
/// JSON object (a value JSONSerialization cannot write would drop the line).
@Suite struct NodeEventJSONTests {
    static let events: [SyncEvent] = [
        .connected(peerNode: 0xabc, peerRole: .watch), .disconnected(reason: "closed"), .keyMismatch(keys: ["a"]),
        .batchSent(number: 1, total: 2, entries: 3), .received(entries: 4, applied: 3),
        .chunk(key: "big", index: 0, count: 2, outgoing: true), .conflictResolved(key: "tags", winner: .merged, rule: .resolver),
        .deferred(key: "big", size: 200_000), .versionRefused(key: "k", aheadMilliseconds: 5_000_000), .idle,
        .error(SyncError(.timeout, "late")),
        .manualRequestReceived(accepted: true, released: 2), .manualRequestAnswered(accepted: false, released: 0),
    ]

    @Test(arguments: events)
    func everyEventIsAJSONObject(_ event: SyncEvent) throws {
        let object = NodeConsole.json(event)
        #expect(JSONSerialization.isValidJSONObject(object), "\(event)")
    }

    @Test func aConflictNamesItsWinnerAndRuleAsStrings() throws {
        let object = NodeConsole.json(.conflictResolved(key: "tags", winner: .remote, rule: .lastWriterWins))
        #expect(object["winner"] as? String == "remote" && object["rule"] as? String == "last-writer-wins")
    }

    @Test func manualRequestEventsSayWhetherAcceptedAndHowManyWereReleased() throws {
        let received = NodeConsole.json(.manualRequestReceived(accepted: true, released: 2))
        #expect(received["event"] as? String == "manual-request-received" && received["accepted"] as? Bool == true && received["released"] as? Int == 2)
        let answered = NodeConsole.json(.manualRequestAnswered(accepted: false, released: 0))
        #expect(answered["event"] as? String == "manual-request-answered" && answered["accepted"] as? Bool == false)
    }
}

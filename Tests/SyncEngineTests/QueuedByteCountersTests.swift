import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// `SyncCounters.bytesSent` / `bytesReceived` (what `syncsim node`'s `status`
/// and `debugDump()` show) count the batches queued delivery moves, as they
/// count a live session's. Before, a queued batch counted its entries and
/// batch but no byte: `status` said `"sent":2,"bytesSent":0`.
@Suite struct QueuedByteCountersTests {
    @Test func queuedBatchesCountTheirBytesBothWays() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let queued = QueuedDeliveryTests()
        let (phone, phoneBox, watch, watchBox) = try queued.peers(pair, directory: folder.path)
        try await pair.phone.set(1_234, for: TestKeys.steps)
        let posted = try phone.deliverQueued(through: phoneBox)
        #expect(posted.entriesPosted == 1)
        let read = try watch.deliverQueued(through: watchBox)
        #expect(read.entriesApplied == 1)

        let sent = pair.phone.syncCounters
        let received = pair.watch.syncCounters
        #expect(sent.entriesSent == 1 && sent.batchesSent == 1)
        #expect(received.entriesReceived == 1 && received.batchesReceived == 1)
        #expect(sent.bytesSent > 0, "the queued batch's bytes count as sent")
        #expect(received.bytesReceived == sent.bytesSent, "and as received, the same payload")
    }
}

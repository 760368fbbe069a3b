import CSQLite
import Testing
@testable import SyncEngine

/// SQLite's process-wide allocation statistics are off from the moment
/// SyncEngine loads: no allocation of any connection (a reader's, the writer
/// applying a batch) takes the one mutex they were counted under.
@Suite struct SQLiteSetupTests {
    @Test func sqliteCountsNoAllocationOnceSyncEngineLoaded() throws {
        #expect(SQLiteLibrary.allocationStatisticsOff)
        let megabyte: Int64 = 1 << 20
        let block = sqlite3_malloc64(UInt64(megabyte))
        defer { sqlite3_free(block) }
        try #require(block != nil)
        // Counted, the block alone would make at least a megabyte in use.
        #expect(sqlite3_memory_used() < megabyte)
        #expect(sqlite3_memory_highwater(0) < megabyte)
    }
}

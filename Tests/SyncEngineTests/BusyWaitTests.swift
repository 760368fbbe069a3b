import CSQLite
import Testing

/// The busy handler of a store's connections (`syncengine_busy_wait`): short
/// sleeps first, since the locks a writer meets are held for well under a
/// millisecond (a step of the idle WAL trim's cut), and about 5 s in all, as
/// `sqlite3_busy_timeout(5_000)` gave before.
@Suite struct BusyWaitTests {
    @Test func theWaitStartsFineGrowsAndGivesUpAfterAboutFiveSeconds() {
        var delays: [Int64] = []
        var tries: Int32 = 0
        while true {
            let delay = syncengine_busy_delay(tries)
            if delay < 0 { break }
            delays.append(delay)
            tries += 1
        }
        // SQLite's default sleeps 1 ms first, outlasting a 0.3-0.7 ms hold.
        #expect(delays.first == 50)
        #expect(delays.prefix(4).reduce(0, +) < 1_000, "four tries within a millisecond")
        #expect(zip(delays, delays.dropFirst()).allSatisfy { $0 <= $1 }, "never shorter than the try before")
        #expect(delays.max()! <= 20_000)
        let total = delays.reduce(0, +)
        #expect(total >= 4_900_000 && total <= 5_200_000, "\(total) µs in all")
        #expect(syncengine_busy_delay(-1) < 0)
    }
}

@testable import SyncEngine
import Testing

@Suite struct HLCTests {
    @Test func monotonicWhenTheWallClockGoesBack() throws {
        let wall = ManualClock(now: 1_000_000)
        let clock = HybridLogicalClock(node: 1, physical: wall)
        var last = try clock.now()
        for step in 0..<1000 {
            wall.advance(by: step % 3 == 0 ? -50 : 1)
            let next = try clock.now()
            #expect(next > last)
            last = next
        }
    }

    @Test func causallyLaterWriteOrdersAfterDespiteSkew() throws {
        for skew in [Int64(-600_000), 600_000] {
            let phoneWall = ManualClock(now: 10_000_000)
            let watchWall = ManualClock(now: 10_000_000, skewMilliseconds: skew)
            let phone = HybridLogicalClock(node: 1, physical: phoneWall)
            let watch = HybridLogicalClock(node: 2, physical: watchWall)
            let write = try phone.now()
            watch.observe(write)
            let later = try watch.now()
            #expect(later > write)
        }
    }

    @Test func tieBreaksOnNode() {
        let a = HLCTimestamp(physicalMilliseconds: 5, counter: 0, node: 1)
        let b = HLCTimestamp(physicalMilliseconds: 5, counter: 0, node: 2)
        #expect(a < b)
        #expect(HLCTimestamp(physicalMilliseconds: 5, counter: 1, node: 1) > b)
    }

    @Test func restartFloorPreventsReuse() throws {
        let wall = ManualClock(now: 1_000)
        let first = try HybridLogicalClock(node: 1, physical: ManualClock(now: 9_000)).now()
        let restarted = HybridLogicalClock(node: 1, physical: wall, floor: first.packed)
        #expect(try restarted.now() > first)
    }

    /// The clock's arithmetic is checked: at the largest version, or with a
    /// wall clock outside what a version holds, `now()` throws; it never traps.
    @Test func clockOutOfRangeThrowsInsteadOfTrapping() throws {
        let saturated = HybridLogicalClock(node: 1, physical: ManualClock(now: 1_000), floor: Int64.max)
        #expect { try saturated.now() } throws: { ($0 as? SyncError)?.code == .clockOutOfRange }
        let observed = HybridLogicalClock(node: 1, physical: ManualClock(now: 1_000))
        observed.observe(HLCTimestamp(packed: HLCTimestamp.maxPacked, node: 2))
        #expect { try observed.now() } throws: { ($0 as? SyncError)?.code == .clockOutOfRange }
        observed.observe(HLCTimestamp(packed: Int64.max, node: 2))  // beyond any version: ignored
        #expect(observed.latest == HLCTimestamp.maxPacked)
        let farWall = HybridLogicalClock(node: 1, physical: ManualClock(now: Int64.max / 2))
        #expect { try farWall.now() } throws: { ($0 as? SyncError)?.code == .clockOutOfRange }
        let negativeWall = HybridLogicalClock(node: 1, physical: ManualClock(now: -5))
        #expect { try negativeWall.now() } throws: { ($0 as? SyncError)?.code == .clockOutOfRange }
    }
}

@testable import SyncEngine
import Testing

@Suite struct HLCTests {
    @Test func monotonicWhenTheWallClockGoesBack() {
        let wall = ManualClock(now: 1_000_000)
        let clock = HybridLogicalClock(node: 1, physical: wall)
        var last = clock.now()
        for step in 0..<1000 {
            wall.advance(by: step % 3 == 0 ? -50 : 1)
            let next = clock.now()
            #expect(next > last)
            last = next
        }
    }

    @Test func causallyLaterWriteOrdersAfterDespiteSkew() {
        for skew in [Int64(-600_000), 600_000] {
            let phoneWall = ManualClock(now: 10_000_000)
            let watchWall = ManualClock(now: 10_000_000, skewMilliseconds: skew)
            let phone = HybridLogicalClock(node: 1, physical: phoneWall)
            let watch = HybridLogicalClock(node: 2, physical: watchWall)
            let write = phone.now()
            watch.observe(write)
            let later = watch.now()
            #expect(later > write)
        }
    }

    @Test func tieBreaksOnNode() {
        let a = HLCTimestamp(physicalMilliseconds: 5, counter: 0, node: 1)
        let b = HLCTimestamp(physicalMilliseconds: 5, counter: 0, node: 2)
        #expect(a < b)
        #expect(HLCTimestamp(physicalMilliseconds: 5, counter: 1, node: 1) > b)
    }

    @Test func restartFloorPreventsReuse() {
        let wall = ManualClock(now: 1_000)
        let first = HybridLogicalClock(node: 1, physical: ManualClock(now: 9_000)).now()
        let restarted = HybridLogicalClock(node: 1, physical: wall, floor: first.packed)
        #expect(restarted.now() > first)
    }
}

import CTestParallelism
import Foundation
import Testing

/// A plain `swift test` runs at most four tests per core at once, as
/// `scripts/test` does: unbounded, all ~1,000 start together, and on two
/// busy cores some wait past their deadlines (README, Tests).
@Suite struct TestParallelismTests {
    @Test func theTestProcessIsBoundedWhetherOrNotTheCallerSetTheWidth() {
        let width = syncengine_test_parallelism_width()
        #expect(width > 0, "SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH is unset: every test starts at once")
        if syncengine_test_parallelism_was_defaulted() != 0 {
            #expect(width == 4 * ProcessInfo.processInfo.activeProcessorCount)
        }
    }
}

import Logging
@testable import SyncSim
import Testing

/// `SYNCSIM_LOG` names a swift-log level: a level in capitals (`NOTICE`) or
/// a misspelling (`verbose`) was ignored without a word, the run silent.
@Suite struct SimLogLevelTests {
    @Test func levelsAreReadWhateverTheirCase() {
        #expect(SimNode.logLevel(named: "notice").level == .notice)
        #expect(SimNode.logLevel(named: "NOTICE").level == .notice)
        #expect(SimNode.logLevel(named: " Trace ").level == .trace)
        #expect(SimNode.logLevel(named: nil).level == nil && SimNode.logLevel(named: nil).warning == nil)
        #expect(SimNode.logLevel(named: "").warning == nil)
    }

    @Test func anUnknownLevelIsNamedWithTheKnownOnes() throws {
        let (level, warning) = SimNode.logLevel(named: "verbose")
        #expect(level == nil)
        let text = try #require(warning)
        #expect(text.contains("SYNCSIM_LOG=verbose") && text.contains("trace") && text.contains("critical"), "\(text)")
    }
}

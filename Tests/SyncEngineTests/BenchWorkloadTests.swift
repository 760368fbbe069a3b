import Foundation
import SyncSim
import Testing

/// `syncsim bench sync --workload family`: the repetitive workload runs end
/// to end, its rows are tagged, and protocol 1 is measured beside protocol 2
/// in the same run. Byte counts only, no timing assertions.
@Suite struct BenchWorkloadTests {
    @Test func familyWorkloadQuickRunComparesBothProtocols() async throws {
        let figures = try await SyncBenchmark(quick: true, workload: .family).run()
        func figure(_ name: String) throws -> BenchFigure {
            try #require(figures.first { $0.name == name + " [family workload]" }, "\(name)")
        }
        #expect(figures.allSatisfy { $0.name.hasSuffix(" [family workload]") })
        let initial = try figure("TCP wire bytes ÷ zlib-6(raw key+value), initial").value
        let before = try figure("TCP wire bytes ÷ zlib-6(raw key+value), initial, protocol 1 (before wire v2)").value
        #expect(initial > 0.3 && before > 0.3)
        // Protocol 2's columns save bytes on this workload: the ratio is a byte count, not a time.
        let ratio = try figure("protocol 2 ÷ protocol 1: initial sync wire bytes").value
        #expect(ratio > 0.2 && ratio < 1.0)
        #expect(try figure("incremental wire ÷ zlib(raw key+value)").value > 0.3)
    }
}

import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

@Suite(.timeLimit(.minutes(5))) struct ConfigurationBoundsTests {
    /// A chunk size of 0 divided by zero at the first large value; a batch or
    /// chunk larger than a peer's transport accepts was refused whole, every time.
    @Test func settingsOutsideTheirBoundsAreTakenAsTheNearestBoundAndSyncStillWorks() async throws {
        var config = ReplicationConfiguration(pairingEpoch: "test")
        config.chunkSize = 0
        config.maxBatchBytes = 64 << 20
        config.maxBatchEntries = 0
        config.window = -3
        try #require(config.chunkSize == 1024 && config.maxBatchBytes == 2 << 20 && config.maxBatchEntries == 1 && config.window == 1)
        config.chunkSize = 16 << 20
        config.maxBatchBytes = 10
        try #require(config.chunkSize == 1 << 20 && config.maxBatchBytes == 1024)
        config.chunkSize = 0

        let pair = try Pair()
        let large = Data((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try await pair.phone.set(large, for: TestKeys.blob)
        try await pair.phone.set(3, for: TestKeys.steps)
        try await pair.phone.set("Ada", for: TestKeys.name)
        try pair.phone.requestManualSync()
        let link = Link(endpoints: ReplicationEndpoint(store: pair.phone, configuration: config),
                        ReplicationEndpoint(store: pair.watch, configuration: config), now: 1_000)
        link.connect()
        link.settle()
        #expect(link.a.failure == nil && link.b.failure == nil)
        #expect(try await pair.watch.get(TestKeys.blob) == large)
        #expect(try await pair.watch.get(TestKeys.steps) == 3)
        #expect(try await pair.watch.get(TestKeys.name) == "Ada")
    }
}

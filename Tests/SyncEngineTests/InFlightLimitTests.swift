import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// What may be in flight without an acknowledgement: up to `window` messages
/// (many single writes, each waiting for the peer's fsync), and up to
/// `maxBytesInFlight` bytes of keys and values (large batches).
@Suite struct InFlightLimitTests {
    static func established(_ pair: Pair, _ configuration: ReplicationConfiguration) -> ReplicationEndpoint {
        let phone = ReplicationEndpoint(store: pair.phone, configuration: configuration)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
        establish(phone, watch)
        return phone
    }

    static func batches(_ frames: [Frame]) -> Int { frames.filter { $0.type == SyncMessage.MessageType.batch.rawValue }.count }

    @Test func manySmallBatchesGoWithoutWaiting() throws {
        let pair = try Pair()
        var configuration = ReplicationConfiguration(pairingEpoch: "test")
        configuration.burstCoalescing = nil
        let phone = Self.established(pair, configuration)
        var sent = 0
        for i in 0..<20 {
            try pair.phone.setNow(i, for: TestKeys.daily["s\(i)"])
            sent += Self.batches(phone.pump(now: 0))
        }
        #expect(sent == configuration.window)
        #expect(configuration.window == 16)
    }

    @Test func bytesInFlightAreBounded() throws {
        let pair = try Pair()
        var configuration = ReplicationConfiguration(pairingEpoch: "test")
        configuration.burstCoalescing = nil
        configuration.maxBytesInFlight = 1_000
        let phone = Self.established(pair, configuration)
        var sent = 0
        for i in 0..<6 {
            try pair.phone.setNow(Data(repeating: UInt8(i), count: 600), for: TestKeys.blob)
            sent += Self.batches(phone.pump(now: 0))
        }
        // 600 bytes in flight leave room; 1,200 do not, until an acknowledgement.
        #expect(sent == 2)
        // One large message still goes when nothing is in flight.
        configuration.maxBytesInFlight = 100
        let other = try Pair()
        let lone = Self.established(other, configuration)
        try other.phone.setNow(Data(repeating: 7, count: 600), for: TestKeys.blob)
        #expect(Self.batches(lone.pump(now: 0)) == 1)
    }
}

import Foundation
import PropertyBased
@testable import SyncEngine
import SyncTransport
import Testing

/// The smaller share of property cases over real TCP: random writes and
/// removes on both devices while connected; after both are idle, the two
/// stores agree and equal the model (highest HLC version wins).
@Suite struct PropertyTCPTests {
    @Test func randomWritesOverTCPConvergeToTheModel() async {
        let cases = max(10, propertyCases / 25)
        await propertyCheck(count: cases, input: Gen.int(in: 0...599).array(of: 1...20)) { codes in
            do {
                let pair = try Pair()
                let keys = [TestKeys.steps, TestKeys.daily["a"], TestKeys.daily["b"]]
                try await withConnectedPeers(pair, over: .tcp) { phone, watch in
                    for code in codes {
                        let store = code % 2 == 0 ? pair.phone : pair.watch
                        let key = keys[(code / 2) % keys.count]
                        if code % 7 == 0 { try await store.remove(key) } else { try await store.set(code, for: key) }
                    }
                    try await phone.waitUntilIdle(timeout: .seconds(30))
                    try await watch.waitUntilIdle(timeout: .seconds(30))
                    try await phone.waitUntilIdle(timeout: .seconds(30))
                }
                for key in keys {
                    let p = try pair.phone.entryInfo(forKey: key.name), w = try pair.watch.entryInfo(forKey: key.name)
                    #expect(p?.version == w?.version, "\(key.name) for \(codes)")
                    #expect(try pair.phone.storedValue(for: key) == pair.watch.storedValue(for: key), "\(key.name) for \(codes)")
                }
            } catch {
                Issue.record("\(error) for \(codes)")
            }
        }
    }
}

import Foundation
import PropertyBased
@testable import SyncEngine
import SyncTransport
import Testing

/// Random writes and removes on both devices over real TCP while connected
/// (`propertyCases` cases, like every property); after both are idle, the two
/// stores agree and equal the model: for each key, the write with the highest
/// HLC version wins.
@Suite struct PropertyTCPTests {
    @Test func randomWritesOverTCPConvergeToTheModel() async {
        await propertyCheck(count: propertyCases, input: Gen.int(in: 0...599).array(of: 1...20)) { codes in
            await Task.yield()  // one case at a time: let the tests beside it run
            do {
                let pair = try Pair()
                let keys = [TestKeys.steps, TestKeys.daily["a"], TestKeys.daily["b"]]
                // Every version a write produced, with what it wrote (nil: removed).
                var written: [String: [(version: HLCTimestamp, value: Int?)]] = [:]
                try await withConnectedPeers(pair, over: .tcp) { phone, watch in
                    for code in codes {
                        let store = code % 2 == 0 ? pair.phone : pair.watch
                        let key = keys[(code / 2) % keys.count]
                        let value: Int? = code % 7 == 0 ? nil : code
                        if let value { try await store.set(value, for: key) } else { try await store.remove(key) }
                        // Read back at once: a newer remote write may already have replaced it, and then
                        // that one is recorded instead (the one replaced lost to it, so the winner is kept).
                        // Removing a key this store never held writes nothing.
                        if let entry = try store.entry(forKey: key.name, declaredAs: nil) {
                            written[key.name, default: []].append((entry.version, entry.bytes.flatMap { Int(String(decoding: $0, as: UTF8.self)) }))
                        }
                    }
                    try await phone.waitUntilIdle(timeout: waitLimit)
                    try await watch.waitUntilIdle(timeout: waitLimit)
                    try await phone.waitUntilIdle(timeout: waitLimit)
                }
                for key in keys {
                    let p = try pair.phone.entryInfo(forKey: key.name), w = try pair.watch.entryInfo(forKey: key.name)
                    #expect(p?.version == w?.version, "\(key.name) for \(codes)")
                    #expect(try pair.phone.storedValue(for: key) == pair.watch.storedValue(for: key), "\(key.name) for \(codes)")
                    let winner = written[key.name]?.max { $0.version < $1.version }
                    #expect(p?.version == winner?.version, "model: \(key.name) for \(codes)")
                    #expect(try pair.phone.storedValue(for: key) == winner?.value, "model: \(key.name) for \(codes)")
                }
            } catch {
                Issue.record("\(error) for \(codes)")
            }
        }
    }
}

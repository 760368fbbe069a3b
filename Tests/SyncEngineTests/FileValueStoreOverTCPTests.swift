import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// Two `FileValueStore`s over real TCP: a value of exactly the automatic
/// limit (102,400 serialized bytes) goes on its own; one byte more is
/// deferred and goes with `sync()`; a 3 MB manual value goes in chunks; a
/// JSON string's limit counts its quotes; replaced and removed values leave
/// no files behind.
@Suite(.timeLimit(.minutes(5))) struct FileValueStoreOverTCPTests {
    static let big = Key<Data>("big", default: Data(), availability: .all, policy: .manual, serializer: .data)
    static let text = Key<String>("text", default: "", availability: .all, policy: .automaticSmall)

    /// Incompressible bytes, the same for a seed.
    static func random(_ count: Int, seed: UInt64) -> Data {
        var state = seed
        return Data((0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        })
    }

    @Test func valuesAtAndOverTheAutomaticLimitAndLargeManualOnes() async throws {
        var setUp = try Pair(keys: TestKeys.all + [Self.big, Self.text])
        let registry = setUp.phone.registry
        setUp.phone.close()
        setUp.watch.close()
        let phoneFiles = try FileValueStore(directory: setUp.folder.file("pf"), role: .phone, registry: registry,
                                            options: StoreOptions(clock: setUp.phoneClock, encryption: .keyFile(path: setUp.folder.file("p.key"))))
        let watchFiles = try FileValueStore(directory: setUp.folder.file("wf"), role: .watch, registry: registry,
                                            options: StoreOptions(clock: setUp.watchClock, encryption: .keyFile(path: setUp.folder.file("w.key"))))
        defer { phoneFiles.close(); watchFiles.close() }
        setUp.phone = phoneFiles.syncStore
        setUp.watch = watchFiles.syncStore
        let pair = setUp
        let atLimit = Self.random(SyncPolicy.automaticLimit, seed: 1)
        let overLimit = Self.random(SyncPolicy.automaticLimit + 1, seed: 2)
        let huge = Self.random(3_000_000, seed: 3)
        let events = pair.phone.events()
        try await withConnectedPeers(pair, over: .tcp) { phone, watch in
            try await phoneFiles.set(atLimit, for: TestKeys.blob)
            try await eventually(watchFiles, "the blob of exactly 100 KB on the watch, without sync()") { try watchFiles.value(for: TestKeys.blob) == atLimit }
            try await phoneFiles.set(overLimit, for: TestKeys.blob)
            try await first(of: events, "the over-limit blob reported as deferred") { if case .deferred = $0 { return true }; return false }
            try await phone.waitUntilIdle(timeout: waitLimit)
            #expect(try watchFiles.value(for: TestKeys.blob) == atLimit)
            _ = try phone.sync()
            try await eventually(watchFiles, "the over-limit blob on the watch after sync()") { try watchFiles.value(for: TestKeys.blob) == overLimit }
            try await phoneFiles.set(huge, for: Self.big)
            _ = try phone.sync()
            try await eventually(watchFiles, "the 3 MB manual value on the watch") { try watchFiles.value(for: Self.big) == huge }
            // JSON string of exactly the limit serialized (quotes count).
            let s = String(repeating: "x", count: SyncPolicy.automaticLimit - 2)
            try await watchFiles.set(s, for: Self.text)
            try await eventually(phoneFiles, "the string of 100 KB serialized on the phone") { try phoneFiles.value(for: Self.text) == s }
            let s2 = String(repeating: "y", count: SyncPolicy.automaticLimit - 1)
            try await watchFiles.set(s2, for: Self.text)
            try await watch.waitUntilIdle(timeout: waitLimit)
            #expect(try phoneFiles.value(for: Self.text) == s)
            _ = try watch.sync()
            try await eventually(phoneFiles, "the string one byte over, after the watch's sync()") { try phoneFiles.value(for: Self.text) == s2 }
            try await watchFiles.remove(Self.big)
            _ = try watch.sync()
            try await eventually(phoneFiles, "the removal of the large value on the phone") { try phoneFiles.contains(Self.big) == false }
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: phoneFiles.directory + "/values")
        #expect(left.count == 2, "one file per live value (blob, text), none left by replaced or removed ones: \(left)")
    }
}

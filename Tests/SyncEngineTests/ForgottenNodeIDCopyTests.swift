import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// A node id the phone forgot comes back as another device: a watch set up
/// from a copy of the first one's store, under a pairing of its own.
@Suite(.timeLimit(.minutes(2))) struct ForgottenNodeIDCopyTests {
    /// Watch A deletes a key the phone wrote; the phone forgets A; a copy of
    /// A's store made before the delete (the same node id, another pairing)
    /// connects. The phone sends it the delete, though the delete came from
    /// that node id: the device it came from holds it already. Before, the
    /// phone never sent a change back to the node id it came from, so the
    /// copy kept the value for good, and the phone's cursor for it went past
    /// the delete (fuzz seed 433001875).
    @Test func aCopyUnderTheNodeIDOfAForgottenWatchGetsWhatThatWatchSent() async throws {
        var pair = try Pair()
        let watchOptions = StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("watch.key")))
        try await pair.phone.set(8_000, for: TestKeys.steps)
        Link(pair.phone, pair.watch, epoch: "pairing-a").connect()
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 8_000)
        // A copy of watch A's store, before its delete (a backup restored on another watch later).
        let watchNode = pair.watch.nodeID
        pair.watch.close()
        let copyPath = pair.folder.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: pair.folder.file("watch.sqlite"), toPath: copyPath)
        pair.watch = try SyncStore(path: pair.folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(), options: watchOptions)
        pair.watchClock.advance(by: 1_000)
        try await pair.watch.remove(TestKeys.steps)
        Link(pair.phone, pair.watch, epoch: "pairing-a").connect()
        #expect(try pair.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
        // The phone forgets watch A; the copy, with A's node id, comes under a pairing of its own.
        #expect(try pair.phone.forgetPeer(watchNode))
        let copy = try SyncStore(path: copyPath, role: .watch, registry: try TestKeys.registry(), options: watchOptions)
        #expect(copy.nodeID == watchNode)
        #expect(try copy.storedValue(for: TestKeys.steps) == 8_000)
        let toCopy = Link(pair.phone, copy, epoch: "pairing-b")
        toCopy.connect()
        #expect(toCopy.a.failure == nil && toCopy.b.failure == nil)
        #expect(try copy.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
        #expect(toCopy.a.isIdle && toCopy.b.isIdle)
    }
}

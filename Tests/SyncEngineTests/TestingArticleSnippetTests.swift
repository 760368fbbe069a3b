import Foundation
import SyncEngine
import SyncTransport
import Testing

/// The Testing article's "Two peers in one process" snippet, run as written
/// (with the test keys): the write reaches the watch by its `waitUntilIdle`.
@Suite struct TestingArticleSnippetTests {
    @Test func twoPeersInOneProcess() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        let phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry, options: options)
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: StoreOptions(encryption: .keyFile(path: folder.file("kw"))))
        let (a, b) = InMemoryConnection.makePair()
        let phonePeer = SyncPeer(store: phone, configuration: ReplicationConfiguration(pairingEpoch: "test"))
        let watchPeer = SyncPeer(store: watch, configuration: ReplicationConfiguration(pairingEpoch: "test"))
        let t1 = Task { await phonePeer.run(over: a) }
        let t2 = Task { await watchPeer.run(over: b) }
        try await phone.set(42, for: TestKeys.steps)
        try await watchPeer.waitUntilIdle(timeout: .seconds(30))
        #expect(try await watch.get(TestKeys.steps) == 42)
        t1.cancel(); t2.cancel()
        _ = await (t1.value, t2.value)
    }
}

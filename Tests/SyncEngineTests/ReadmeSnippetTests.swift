import Foundation
import Observation
import Synchronization
import SyncEngine
import Testing

/// The README's "Backends…" and "Coming from…" snippets, compiled and run.
@Suite struct ReadmeSnippetTests {
    @Observable final class SettingsModel {
        @ObservationIgnored @Stored var units: String
        init(store: any KeyValueBackend) { _units = Stored(TestKeys.units, store: store) }
    }

    @Test func comingFromSnippetsWork() async throws {
        let folder = TempFolder()
        let stepsKey = Key<Int>("steps", in: Namespace("health"), default: 0)
        let token = Key<String>("token", in: Namespace("account"), default: "",
                                availability: .phoneOnly, policy: .never, security: .encrypted)
        let face = Key<Data>("face", default: Data(), availability: .all, policy: .manual, serializer: .data)
        let lion = Key<Int?>("lion", in: Namespace("animals").child("cats"), default: nil)
        let registry = try KeyRegistry([stepsKey, token, face, lion])
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry,
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try await store.set(8_000, for: stepsKey)
        #expect(try await store.get(stepsKey) == 8_000)
        @Stored(stepsKey, store: store) var liveSteps: Int
        #expect(liveSteps == 8_000)

        func render(_ store: any KeyValueBackend) throws -> Int { try store.value(for: stepsKey) }
        let media = try FileValueStore(directory: folder.file("Media"), role: .phone, registry: registry,
                                       options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
            .replacing(store)
        #expect(try render(media) == 8_000)

        #expect(lion.name == "animals:cats:lion")
        let committed = Mutex<[String]>([])
        store.addDidCommitHook { changes in committed.withLock { $0 += changes.map(\.key) } }
        try await store.set(8, for: lion)
        #expect(try await store.get(lion) == 8)
        #expect(committed.withLock { $0 } == ["animals:cats:lion"])

        let preview = SettingsModel(store: InMemoryStore(role: .phone, registry: try TestKeys.registry()))
        #expect(preview.units == "metric")
    }
}

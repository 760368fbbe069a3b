import Foundation
@testable import SyncEngine
import Testing

/// A read through a declaration the registry refuses (`key-declaration-mismatch`)
/// was refused only on a cache miss: once the key was cached through the
/// registered declaration, a compatible one (same type and serializer, another
/// policy) read the cached value. A hit now refuses exactly what a miss refuses.
@Suite struct CachedDeclarationCheckTests {
    /// `TestKeys.steps` declared with another policy.
    static let otherSteps = Key<Int>("steps", in: Namespace("health").child("daily"), default: 0, availability: .all, policy: .manual)
    /// `TestKeys.name` declared with another policy.
    static let otherName = Key<String>("name", in: Namespace("profile"), default: "", availability: .all, policy: .automaticSmall)

    private static func isMismatch(_ error: any Error) -> Bool {
        (error as? SyncError)?.code == .keyDeclarationMismatch
    }

    /// Every read of `key` throws `key-declaration-mismatch`, through every path.
    private static func expectRefused<Value: Sendable>(_ store: SyncStore, _ key: Key<Value>) async {
        #expect(store.cachedValue(for: key) == nil)
        #expect { _ = try store.value(for: key) } throws: { isMismatch($0) }
        #expect { _ = try store.storedValue(for: key) } throws: { isMismatch($0) }
        #expect { _ = try store.entry(forKey: key.name, declaredAs: key.descriptor) } throws: { isMismatch($0) }
        await #expect { _ = try await store.get(key) } throws: { isMismatch($0) }
    }

    @Test func aCachedValueIsRefusedThroughAnotherDeclarationAsAMissRefusesIt() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("s.key")))
        try await closedStoreWithOneValue(at: path, options: options)
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        defer { store.close() }
        await Self.expectRefused(store, Self.otherSteps)  // a miss

        // Cached through the registered declaration: decoded, then in its typed box.
        #expect(try store.value(for: TestKeys.steps) == 3)
        #expect(try store.value(for: TestKeys.steps) == 3)
        await Self.expectRefused(store, Self.otherSteps)
        #expect(try store.value(for: TestKeys.steps) == 3, "the registered declaration still reads")
        #expect(store.cachedValue(for: TestKeys.steps) == 3)

        // Cached by an untyped read (no decoded value), and after a write.
        store.cache.invalidateAll()
        #expect(try store.entry(forKey: TestKeys.steps.name, declaredAs: nil)?.bytes != nil)
        await Self.expectRefused(store, Self.otherSteps)
        try store.setNow(4, for: TestKeys.steps)
        await Self.expectRefused(store, Self.otherSteps)
        #expect(try store.value(for: TestKeys.steps) == 4)

        // A cached absence.
        #expect(try store.value(for: TestKeys.name) == "")
        await Self.expectRefused(store, Self.otherName)
        #expect(try store.value(for: TestKeys.name) == "")
    }

    /// A family member read through its own key is checked once, then answered from the typed box.
    @Test func aFamilyMemberStillReadsFromTheCache() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("s.key"))))
        defer { store.close() }
        try store.setNow(7, for: TestKeys.daily["mon"])
        #expect(try store.value(for: TestKeys.daily["mon"]) == 7)
        #expect(try store.value(for: TestKeys.daily["mon"]) == 7)
        store.resetCacheStatistics()
        #expect(store.cachedValue(for: TestKeys.daily["mon"]) == 7)
        #expect(store.cacheStatistics.hits == 1 && store.cacheStatistics.misses == 0)
    }

    /// A typed hit compares declaration tokens: equal for a key and its family's
    /// members (the name is not in it), different when anything else differs.
    @Test func declarationTokensTellDeclarationsApart() {
        let member = TestKeys.daily["mon"]
        #expect(member.declarationToken == TestKeys.daily.declarationToken)
        #expect(member.declarationToken == member.descriptor.declarationToken)
        #expect(TestKeys.steps.declarationToken == TestKeys.steps.descriptor.declarationToken)
        let base = TestKeys.steps.descriptor
        var variants: [KeyDescriptor] = []
        for change in [{ (d: inout KeyDescriptor) in d.policy = d.policy == .manual ? .never : .manual },
                       { $0.availability = $0.availability == .phoneOnly ? .all : .phoneOnly },
                       { $0.security = $0.security == .encrypted ? .none : .encrypted },
                       { $0.encoding = $0.encoding + "2" }, { $0.isFamily.toggle() }, { $0.resolver = "max" },
                       { $0.legacyName = "old:steps" }, { $0.valueType = "Double" }] {
            var changed = base
            change(&changed)
            variants.append(changed)
        }
        for variant in variants { #expect(variant.declarationToken != base.declarationToken, "\(variant)") }
    }
}

import Foundation
import Testing
@testable import SyncEngine

/// `KeyRegistry.registered(forEntry:memo:)` remembers the last family prefix
/// it resolved; it must answer as the plain lookup does, whatever the run of keys.
@Suite struct FamilyLookupMemoTests {
    static let outer = KeyFamily<Int>("outer", default: 0, availability: .all, policy: .automaticSmall)
    static let inner = KeyFamily<Int>("inner", in: Namespace("outer"), default: 0, availability: .all, policy: .manual)
    // An exact key with a ':' (one named as `outer`'s member, `outer:special`, is refused by the registry).
    static let exactMember = Key<Int>("special", in: Namespace("plain"), default: 0, availability: .phoneOnly, policy: .automaticSmall)
    static let plain = Key<Int>("plain", default: 0, availability: .all, policy: .automaticSmall)

    static func registry() throws -> KeyRegistry { try KeyRegistry([outer, inner, exactMember, plain]) }

    static let keys = [
        "outer:1", "outer:2", "outer:inner:1", "outer:inner:2", "outer:3",  // a family, the family inside it, back
        "plain:special", "outer:4",                                         // an exact key with a ':' between members
        "plain", "plain:1", "nocolon", "", ":", ":x", "outer:", "outer::x", // no family, empty prefixes and members
        "other:1", "other:2", "outer:5", "outer:inner:",                     // an undeclared prefix between members
        "outer:\u{301}accent", "outër:1", "outer:1",                         // a combining mark after the ':', another prefix
    ]

    @Test func answersAsThePlainLookupForEveryOrderOfKeys() throws {
        let registry = try Self.registry()
        var random = SystemRandomNumberGenerator()
        for round in 0..<50 {
            let keys = round == 0 ? Self.keys : Self.keys.shuffled(using: &random)
            var memo = KeyRegistry.FamilyLookupMemo()
            for key in keys {
                let remembered = registry.registered(forEntry: key, memo: &memo)?.descriptor.name
                #expect(remembered == registry.registered(forEntry: key)?.descriptor.name, "key \(key) in order \(keys)")
            }
        }
    }

    @Test func resolvesMembersToTheirFamiliesAndExactKeysToThemselves() throws {
        let registry = try Self.registry()
        var memo = KeyRegistry.FamilyLookupMemo()
        let names = ["outer:1", "outer:inner:9", "plain:special", "outer:2", "other:1", "plain:1", "plain"]
            .map { registry.registered(forEntry: $0, memo: &memo)?.descriptor.name }
        #expect(names == ["outer", "outer:inner", "plain:special", "outer", nil, nil, "plain"])
    }

    /// A key with many ':' is looked up only where a family name could end:
    /// each ':' made a string of the bytes before it and looked it up, so a
    /// peer's batch of 8,000 keys of 1 KiB with 500 ':' each (8 MiB inflated,
    /// 30 KB on the wire) took seconds of the session's CPU to plan.
    @Test func aKeyWithManyColonsIsLookedUpOnlyWhereAFamilyNameCouldEnd() throws {
        let registry = try Self.registry()
        for key in [String(repeating: "a:", count: 505) + "z", "outer:" + String(repeating: "x:", count: 500) + "1",
                    "outer:inner:" + String(repeating: ":", count: 900)] {
            var lookups = 0
            let found = registry.family(forEntry: key, onLookup: { lookups += 1 })
            #expect(lookups <= 2, "\(lookups) lookups for a key of \(key.utf8.count) bytes")
            #expect(found?.descriptor.name == registry.registered(forEntry: key)?.descriptor.name)
        }
        #expect(registry.registered(forEntry: "outer:" + String(repeating: "x:", count: 500) + "1")?.descriptor.name == "outer")
        #expect(registry.registered(forEntry: "outer:inner:" + String(repeating: ":", count: 900))?.descriptor.name == "outer:inner")
        #expect(registry.registered(forEntry: String(repeating: "a:", count: 505) + "z") == nil)
    }
}

import Foundation
import PropertyBased
@testable import SyncEngine
import Testing

/// A keys file's built-in `union` and `max` merge to the very bytes an app's
/// typed `.union()` and `.max` give, for the types the file names, and stay joins.
@Suite(.timeLimit(.minutes(5))) struct BuiltinResolverParityTests {
    /// The resolver of key `k` loaded from a real keys file declaring `resolver`, `type` and `encoding`.
    private func fileResolver(_ resolver: String, type: String?, encoding: String = "json",
                              matching typed: KeyDescriptor? = nil) throws -> ErasedResolver {
        let folder = TempFolder()
        var key: [String: Any] = ["name": "k", "resolver": resolver, "encoding": encoding]
        if let type { key["type"] = type }
        let path = folder.file("keys.json")
        try JSONSerialization.data(withJSONObject: ["keys": [key]]).write(to: URL(fileURLWithPath: path))
        let registry = try KeyRegistry.load(jsonFile: path)
        if let typed {
            // The app's key and the file's are one declaration: the peers would sync them.
            #expect(registry.descriptor(forEntry: "k")?.wireDeclaration == typed.wireDeclaration)
        }
        return try #require(registry.registered(forEntry: "k")?.resolver)
    }

    /// For every triple: the file's merge equals the typed merge byte for byte,
    /// and the file's merge is commutative, associative and idempotent.
    private func checkParity<T: Codable & Sendable, S>(_ key: Key<T>, type: String, encoding: String = "json",
                                                       _ gen: Generator<T, S>) async throws {
        let typed = try #require(try KeyRegistry([key]).registered(forEntry: key.name)?.resolver)
        let file = try fileResolver(try #require(key.descriptor.resolver), type: type, encoding: encoding, matching: key.descriptor)
        await propertyCheck(count: propertyCases, input: gen, gen, gen) { a, b, c in
            let (a, b, c) = (try! key.serializer.encode(a), try! key.serializer.encode(b), try! key.serializer.encode(c))
            let m = { (x: [UInt8], y: [UInt8]) -> [UInt8] in
                do { return try file.merge(x, y) } catch {
                    Issue.record("\(type): the file's merge threw \(error)")
                    return []
                }
            }
            let ab = m(a, b)
            #expect(ab == (try? typed.merge(a, b)), "\(type): \(String(decoding: a, as: UTF8.self)) ∨ \(String(decoding: b, as: UTF8.self))")
            #expect(ab == m(b, a), "commutative")
            #expect(m(ab, c) == m(a, m(b, c)), "associative")
            #expect(m(ab, ab) == ab, "idempotent")
        }
    }

    /// Integers around ±2^53 and the ends of the range, and small ones that repeat.
    private static let int64s = zip(Gen.int(in: 0...4), Gen.int(in: -12...12), Gen.int64(in: .min ... .max)).map { t -> Int64 in
        switch t.0 {
        case 0, 1: Int64(t.1)
        case 2: (Int64(1) << 53) + Int64(t.1)
        case 3: -(Int64(1) << 53) + Int64(t.1)
        default: t.2
        }
    }
    private static let doubles = zip(Gen.int(in: 0...1), Gen.int(in: -6...6), Gen.double(in: -1e20...1e20)).map { t in
        t.0 == 0 ? Double(t.1) / 4 : t.2
    }
    /// NFC text: letters, accents, CJK, emoji, flags, and what JSON escapes.
    private static let strings = zip(Gen.element(of: pieces), Gen.element(of: pieces)).map { ($0 ?? "") + ($1 ?? "") }
    private static let pieces = ["", "a", "b", "B", "z", "é", "ü", "ß", "Ω", "\u{00C5}", "日本", "日", "🙂", "🇫🇷", "a/b", "\"", "\\", "\n", "10", "9"]

    @Test func unionOfIntegersMatchesTypedUnion() async throws {
        try await checkParity(Key<[Int]>("k", default: [], resolver: .union()), type: "Array<Int>",
                              Self.int64s.map { Int($0) }.array(of: 0...6))
        try await checkParity(Key<[Int64]>("k", default: [], resolver: .union()), type: "Array<Int64>", Self.int64s.array(of: 0...6))
        try await checkParity(Key<[UInt64]>("k", default: [], resolver: .union()), type: "Array<UInt64>",
                              Self.int64s.map { UInt64(bitPattern: $0) }.array(of: 0...6))
    }

    @Test func unionOfDoublesAndStringsMatchesTypedUnion() async throws {
        try await checkParity(Key<[Double]>("k", default: [], resolver: .union()), type: "Array<Double>", Self.doubles.array(of: 0...6))
        try await checkParity(Key<[String]>("k", default: [], resolver: .union()), type: "Array<String>", Self.strings.array(of: 0...6))
        try await checkParity(Key<[UInt8]>("k", default: [], serializer: .bytes, resolver: .union()), type: "Array<UInt8>", encoding: "data",
                              Gen.int(in: 0...255).map { UInt8($0) }.array(of: 0...6))
    }

    @Test func maxMatchesTypedMax() async throws {
        try await checkParity(Key<Int>("k", default: 0, resolver: .max), type: "Int", Self.int64s.map { Int($0) })
        try await checkParity(Key<UInt64>("k", default: 0, resolver: .max), type: "UInt64", Self.int64s.map { UInt64(bitPattern: $0) })
        try await checkParity(Key<Double>("k", default: 0, resolver: .max), type: "Double", Self.doubles)
        try await checkParity(Key<String>("k", default: "", resolver: .max), type: "String", Self.strings)
        try await checkParity(Key<String>("k", default: "", serializer: .string, resolver: .max), type: "String", encoding: "string", Self.strings)
    }

    /// The defect's own case, and values a store merged the old way (ordered by
    /// JSON text): each side merges the same pair to the typed bytes.
    @Test func oldMergedValuesMergeToTheTypedBytes() throws {
        let file = try fileResolver("union", type: "Array<Int>")
        #expect(try file.merge(Array("[10]".utf8), Array("[9]".utf8)) == Array("[9,10]".utf8))
        let oldMerged = Array("[10,9]".utf8)
        for other in ["[9]", "[10,9]", "[11]", "[]"].map({ Array($0.utf8) }) {
            let merged = try file.merge(oldMerged, other)
            #expect(merged == (try file.merge(other, oldMerged)))
            #expect(try JSONDecoder().decode([Int].self, from: Data(merged)) == (try JSONDecoder().decode([Int].self, from: Data(merged))).sorted())
        }
    }

    /// A key of no declared type: `max` compares integers exactly above 2^53.
    @Test func untypedMaxKeepsTheLargerIntegerAbove2To53() throws {
        let file = try fileResolver("max", type: nil)
        let larger = Array("9007199254740993".utf8), smaller = Array("9007199254740992".utf8)
        #expect(try file.merge(larger, smaller) == larger)
        #expect(try file.merge(smaller, larger) == larger)
        #expect(try file.merge(Array("-9007199254740993".utf8), Array("-9007199254740992".utf8)) == Array("-9007199254740992".utf8))
        #expect(try file.merge(Array("1.5".utf8), Array("2".utf8)) == Array("2".utf8))
    }

    /// A phone app (typed key) and a node (keys file naming the type) write
    /// concurrently; after they sync both hold the same bytes.
    @Test func appAndKeysFileConvergeOnConcurrentWrites() async throws {
        let folder = TempFolder()
        let key = Key<[Int]>("n", default: [], resolver: .union())
        let path = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"n","type":"Array<Int>","resolver":"union"}]}"#.utf8).write(to: URL(fileURLWithPath: path))
        let phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: KeyRegistry([key]),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("phone.key"))))
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: KeyRegistry.load(jsonFile: path),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("watch.key"))))
        try await phone.set([10], for: key)
        try await watch.set([9, 9], for: key)
        let link = Link(phone, watch)
        link.connect()
        link.settle()
        let phoneBytes = try #require(try phone.rawValue(forKey: "n"))
        #expect(phoneBytes == Array("[9,10]".utf8))
        #expect(try watch.rawValue(forKey: "n") == phoneBytes)
    }
}

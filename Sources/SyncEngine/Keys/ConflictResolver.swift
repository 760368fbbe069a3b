import Foundation

/// A deterministic merge of two concurrent values of one key.
///
/// Both devices call `merge(older, newer)` with the same arguments (ordered by
/// version), so both reach the same value. The function must be deterministic,
/// commutative, associative and idempotent — a join, like `max` or set union —
/// because a merged value may meet either of its inputs again.
public struct ConflictResolver<Value: Sendable>: Sendable {
    /// The name both peers declare; part of the key's declaration.
    public let name: String
    public let merge: @Sendable (_ older: Value, _ newer: Value) -> Value

    public init(name: String, merge: @escaping @Sendable (_ older: Value, _ newer: Value) -> Value) {
        self.name = name
        self.merge = merge
    }
}

extension ConflictResolver where Value: Comparable {
    /// Keeps the larger value.
    public static var max: ConflictResolver { ConflictResolver(name: "max") { Swift.max($0, $1) } }
}

extension ConflictResolver {
    /// Set union of two arrays, sorted, without duplicates.
    public static func union<Element: Comparable & Hashable & Sendable>() -> ConflictResolver<[Element]> where Value == [Element] {
        ConflictResolver<[Element]>(name: "union") { Array(Set($0).union($1)).sorted() }
    }
}

/// A resolver erased to serialized bytes, as the replication layer uses it.
public struct ErasedResolver: Sendable {
    public let name: String
    public let merge: @Sendable (_ older: [UInt8], _ newer: [UInt8]) throws -> [UInt8]

    public init(name: String, merge: @escaping @Sendable (_ older: [UInt8], _ newer: [UInt8]) throws -> [UInt8]) {
        self.name = name
        self.merge = merge
    }

    init<Value>(_ resolver: ConflictResolver<Value>, serializer: ValueSerializer<Value>) {
        name = resolver.name
        merge = { older, newer in
            try serializer.encode(resolver.merge(try serializer.decode(older), try serializer.decode(newer)))
        }
    }

    /// Resolvers over JSON values for registries loaded from files:
    /// `max` (numbers) and `union` (arrays).
    public static func builtin(named name: String) -> ErasedResolver? {
        switch name {
        case "max":
            return ErasedResolver(name: "max") { older, newer in
                let a = try JSONDecoder().decode(Double.self, from: Data(older))
                let b = try JSONDecoder().decode(Double.self, from: Data(newer))
                return a > b ? older : newer
            }
        case "union":
            return ErasedResolver(name: "union") { older, newer in
                let a = try JSONSerialization.jsonObject(with: Data(older), options: [.fragmentsAllowed]) as? [Any] ?? []
                let b = try JSONSerialization.jsonObject(with: Data(newer), options: [.fragmentsAllowed]) as? [Any] ?? []
                var seen: [String: Any] = [:]
                for element in a + b {
                    let data = try JSONSerialization.data(withJSONObject: [element], options: [.sortedKeys, .fragmentsAllowed])
                    seen[String(decoding: data, as: UTF8.self)] = element
                }
                let merged = seen.keys.sorted().compactMap { seen[$0] }
                return [UInt8](try JSONSerialization.data(withJSONObject: merged, options: [.sortedKeys]))
            }
        default:
            return nil
        }
    }
}

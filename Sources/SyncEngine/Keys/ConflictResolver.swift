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
    /// `max` (numbers) and `union` (arrays), for a key that names no value type.
    public static func builtin(named name: String) -> ErasedResolver? {
        builtin(named: name, valueType: nil)
    }

    /// The built-in resolver `name` for a key of a registry file declaring
    /// `valueType` (its `"type"`) and `encoding`. For the types a typed key can
    /// give these resolvers (`max`: `Int`, `Int8`…`Int64`, `UInt`…`UInt64`,
    /// `Double`, `Float`, `String`; `union`: `Array<>` of those), it merges to
    /// exactly the bytes the typed `.max` / `.union()` give, so a keys file and an
    /// app declaring the key alike converge. Other types, or none, merge JSON
    /// values generically. Nil when `name` is neither `max` nor `union`.
    public static func builtin(named name: String, valueType: String?, encoding: String = "json") -> ErasedResolver? {
        guard name == "max" || name == "union" else { return nil }
        if let valueType, let typed = typedBuiltin(named: name, valueType: valueType, encoding: encoding) { return typed }
        return name == "max" ? untypedMax : untypedUnion
    }

    /// The element types of `typedBuiltin`: what `String(describing:)` names them.
    private static let typedScalars: [any (Codable & Comparable & Hashable & Sendable).Type] = [
        Int.self, Int8.self, Int16.self, Int32.self, Int64.self,
        UInt.self, UInt8.self, UInt16.self, UInt32.self, UInt64.self, Double.self, Float.self, String.self,
    ]

    /// The typed resolver a key of `valueType` and `encoding` would declare, erased.
    private static func typedBuiltin(named name: String, valueType: String, encoding: String) -> ErasedResolver? {
        func maxOf<T: Codable & Comparable & Hashable & Sendable>(_: T.Type) -> ErasedResolver? {
            guard String(describing: T.self) == valueType else { return nil }
            if encoding == "json" { return ErasedResolver(ConflictResolver<T>.max, serializer: .json) }
            if encoding == "string", T.self == String.self { return ErasedResolver(ConflictResolver<String>.max, serializer: .string) }
            return nil
        }
        func unionOf<T: Codable & Comparable & Hashable & Sendable>(_: T.Type) -> ErasedResolver? {
            guard String(describing: [T].self) == valueType else { return nil }
            if encoding == "json" { return ErasedResolver(ConflictResolver<[T]>.union(), serializer: .json) }
            if encoding == "data", T.self == UInt8.self { return ErasedResolver(ConflictResolver<[UInt8]>.union(), serializer: .bytes) }
            return nil
        }
        for scalar in typedScalars {
            if let found = name == "max" ? maxOf(scalar) : unionOf(scalar) { return found }
        }
        return nil
    }

    /// `max` over JSON numbers of a key of no known type: integers compared
    /// exactly (also above 2^53), other numbers as `Double`.
    private static let untypedMax = ErasedResolver(name: "max") { older, newer in
        let decoder = JSONDecoder()
        if let a = try? decoder.decode(Int64.self, from: Data(older)), let b = try? decoder.decode(Int64.self, from: Data(newer)) {
            return a > b ? older : newer
        }
        if let a = try? decoder.decode(UInt64.self, from: Data(older)), let b = try? decoder.decode(UInt64.self, from: Data(newer)) {
            return a > b ? older : newer
        }
        let a = try decoder.decode(Double.self, from: Data(older))
        let b = try decoder.decode(Double.self, from: Data(newer))
        return a > b ? older : newer
    }

    /// `union` over JSON arrays of a key of no known type: elements kept once,
    /// ordered by their JSON text.
    private static let untypedUnion = ErasedResolver(name: "union") { older, newer in
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
}

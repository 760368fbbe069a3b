/// A nestable namespace for key names: `Namespace("health").child("daily")`
/// names keys `health:daily:<name>`.
public struct Namespace: Sendable, Hashable {
    /// The full name, segments joined by `:`.
    public let name: String

    public init(_ name: String) { self.name = name }

    /// A namespace inside this one.
    public func child(_ segment: String) -> Namespace { Namespace("\(name):\(segment)") }

    /// The full name of `key` inside this namespace.
    public func fullName(_ key: String) -> String { "\(name):\(key)" }
}

/// What a typed key contributes to a registry, whatever its value type.
public protocol KeyDeclaration: Sendable {
    var descriptor: KeyDescriptor { get }
    /// The key's value type, for error messages.
    var valueTypeName: String { get }
    /// The resolver, erased to bytes, when the key declares one.
    var erasedResolver: ErasedResolver? { get }
}

/// A typed key: value type, namespaced name, default, availability, sync
/// policy, serializer and security, declared once in code shared by the phone
/// and the watch app.
///
/// ```swift
/// let steps = Key<Int>("steps", in: Namespace("health").child("daily"), default: 0,
///                      availability: .all, policy: .automaticSmall)
/// ```
public struct Key<Value: Codable & Sendable>: KeyDeclaration {
    public let descriptor: KeyDescriptor
    /// `descriptor.declarationToken`, computed once: a cached typed read
    /// compares it with the one its value was checked through.
    @usableFromInline let declarationToken: Int
    /// Returned by reads when nothing is stored.
    public let defaultValue: Value
    public let serializer: ValueSerializer<Value>
    public let resolver: ConflictResolver<Value>?

    public init(_ name: String, in namespace: Namespace? = nil, default defaultValue: Value,
                availability: Availability = .all, policy: SyncPolicy = .automaticSmall,
                serializer: ValueSerializer<Value> = .json, security: KeySecurity = .none,
                resolver: ConflictResolver<Value>? = nil, legacyName: String? = nil) {
        self.init(descriptor: KeyDescriptor(
            name: namespace?.fullName(name) ?? name, availability: availability, policy: policy,
            security: security, encoding: serializer.identifier, isFamily: false,
            resolver: resolver?.name, legacyName: legacyName, valueType: String(describing: Value.self)),
            defaultValue: defaultValue, serializer: serializer, resolver: resolver)
    }

    @usableFromInline
    init(descriptor: KeyDescriptor, defaultValue: Value, serializer: ValueSerializer<Value>, resolver: ConflictResolver<Value>?) {
        self.init(descriptor: descriptor, declarationToken: descriptor.declarationToken, defaultValue: defaultValue,
                  serializer: serializer, resolver: resolver)
    }

    /// A key whose `declarationToken` is known (a family's member: its family's).
    @usableFromInline
    init(descriptor: KeyDescriptor, declarationToken: Int, defaultValue: Value, serializer: ValueSerializer<Value>,
         resolver: ConflictResolver<Value>?) {
        self.descriptor = descriptor
        self.declarationToken = declarationToken
        self.defaultValue = defaultValue
        self.serializer = serializer
        self.resolver = resolver
    }

    /// The full name, e.g. `health:daily:steps`.
    public var name: String { descriptor.name }
    public var valueTypeName: String { String(describing: Value.self) }
    public var erasedResolver: ErasedResolver? { resolver.map { ErasedResolver($0, serializer: serializer) } }
}

/// A family of keys sharing one declaration: `family["2026-11-22"]` is the key
/// `<family name>:2026-11-22`. Register the family once; use any member.
public struct KeyFamily<Value: Codable & Sendable>: KeyDeclaration {
    public let descriptor: KeyDescriptor
    /// `descriptor.declarationToken`, computed once for every member.
    @usableFromInline let declarationToken: Int
    public let defaultValue: Value
    public let serializer: ValueSerializer<Value>
    public let resolver: ConflictResolver<Value>?

    public init(_ name: String, in namespace: Namespace? = nil, default defaultValue: Value,
                availability: Availability = .all, policy: SyncPolicy = .automaticSmall,
                serializer: ValueSerializer<Value> = .json, security: KeySecurity = .none,
                resolver: ConflictResolver<Value>? = nil) {
        descriptor = KeyDescriptor(name: namespace?.fullName(name) ?? name, availability: availability, policy: policy,
                                   security: security, encoding: serializer.identifier, isFamily: true, resolver: resolver?.name,
                                   valueType: String(describing: Value.self))
        declarationToken = descriptor.declarationToken
        self.defaultValue = defaultValue
        self.serializer = serializer
        self.resolver = resolver
    }

    /// The member key `<family>:<id>`. Inlined into the caller (specialized for `Value`).
    @inlinable
    public subscript(id: String) -> Key<Value> {
        var member = descriptor
        member.name = "\(descriptor.name):\(id)"
        return Key(descriptor: member, declarationToken: declarationToken, defaultValue: defaultValue, serializer: serializer, resolver: resolver)
    }

    public var valueTypeName: String { String(describing: Value.self) }
    public var erasedResolver: ErasedResolver? { resolver.map { ErasedResolver($0, serializer: serializer) } }
}

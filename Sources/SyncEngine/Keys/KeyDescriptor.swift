/// The untyped declaration of a key: everything both peers must agree on.
///
/// Typed `Key`s carry one; registries loaded from JSON (`syncsim node --keys`)
/// are made of them directly.
public struct KeyDescriptor: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Full name, namespaces joined by `:` (e.g. `health:daily:steps`), kept
    /// in Unicode NFC: two spellings Swift calls equal are one key.
    public var name: String {
        didSet { name = KeyName.canonical(name) }
    }
    public var availability: Availability
    public var policy: SyncPolicy
    public var security: KeySecurity
    /// Serializer identifier (`json`, `plist`, `data`, `string`, or a custom one).
    public var encoding: String
    /// A family declares many entries: `name:<id>` for any id.
    public var isFamily: Bool
    /// Name of a deterministic conflict resolver; nil for last-writer-wins.
    public var resolver: String?
    /// An older key whose value moves over on first read (NFC, as `name`). A
    /// registry refuses one that is no valid key name, the key's own name, or
    /// another key's legacy name. A value written with another serializer
    /// than `encoding` is not moved: reads throw `type-mismatch` naming it.
    public var legacyName: String? {
        didSet { legacyName = legacyName.map(KeyName.canonical) }
    }
    /// The value's type name (`Int`, `Array<String>`, `Profile`), set by typed
    /// keys and by the `"type"` field of a keys file; nil when undeclared.
    /// Both peers must agree: `Key<Int>` and `Key<String>` under one name do
    /// not sync, though both are JSON.
    public var valueType: String?

    /// A hash of everything but the name: two declarations of one key that
    /// differ have different tokens (but for a 64-bit hash's collisions), so
    /// a cached typed read compares tokens instead of declarations. Valid in
    /// this process only.
    var declarationToken: Int {
        var hasher = Hasher()
        hasher.combine(availability)
        hasher.combine(policy)
        hasher.combine(security)
        hasher.combine(encoding)
        hasher.combine(isFamily)
        hasher.combine(resolver)
        hasher.combine(legacyName)
        hasher.combine(valueType)
        return hasher.finalize()
    }

    public init(name: String, availability: Availability = .all, policy: SyncPolicy = .automaticSmall,
                security: KeySecurity = .none, encoding: String = "json", isFamily: Bool = false,
                resolver: String? = nil, legacyName: String? = nil, valueType: String? = nil) {
        self.name = KeyName.canonical(name)
        self.availability = availability
        self.policy = policy
        self.security = security
        self.encoding = encoding
        self.isFamily = isFamily
        self.resolver = resolver
        self.legacyName = legacyName.map(KeyName.canonical)
        self.valueType = valueType
    }

    enum CodingKeys: String, CodingKey {
        case name, availability, policy, security, encoding, family, resolver, legacyName
        case valueType = "type"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        // A null is not an absent field: `"availability": null` would make the key sync both ways, in plain text.
        for key in [CodingKeys.availability, .policy, .security, .encoding, .family, .resolver, .legacyName, .valueType] where c.contains(key) {
            guard try c.decodeNil(forKey: key) else { continue }
            throw DecodingError.valueNotFound(key == .family ? Bool.self : String.self, DecodingError.Context(
                codingPath: c.codingPath + [key], debugDescription: "must not be null; leave the field out for its default"))
        }
        name = KeyName.canonical(try c.decode(String.self, forKey: .name))
        availability = try KeyDescriptor.decodeCase(Availability.self, c, .availability) ?? .all
        policy = try KeyDescriptor.decodeCase(SyncPolicy.self, c, .policy) ?? .automaticSmall
        security = try KeyDescriptor.decodeCase(KeySecurity.self, c, .security) ?? .none
        encoding = try c.decodeIfPresent(String.self, forKey: .encoding) ?? "json"
        isFamily = try c.decodeIfPresent(Bool.self, forKey: .family) ?? false
        resolver = try c.decodeIfPresent(String.self, forKey: .resolver)
        legacyName = try c.decodeIfPresent(String.self, forKey: .legacyName).map(KeyName.canonical)
        valueType = try c.decodeIfPresent(String.self, forKey: .valueType)
    }

    /// A field holding one of `T`'s cases by name; a name of none throws, listing them.
    private static func decodeCase<T: RawRepresentable & CaseIterable>(_ type: T.Type, _ c: KeyedDecodingContainer<CodingKeys>,
                                                                     _ key: CodingKeys) throws -> T? where T.RawValue == String {
        guard let text = try c.decodeIfPresent(String.self, forKey: key) else { return nil }
        guard let value = T(rawValue: text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: c, debugDescription:
                "'\(text)' is not one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(availability, forKey: .availability)
        try c.encode(policy, forKey: .policy)
        try c.encode(security, forKey: .security)
        if encoding != "json" { try c.encode(encoding, forKey: .encoding) }
        if isFamily { try c.encode(true, forKey: .family) }
        try c.encodeIfPresent(resolver, forKey: .resolver)
        try c.encodeIfPresent(legacyName, forKey: .legacyName)
        try c.encodeIfPresent(valueType, forKey: .valueType)
    }

    /// Whether entries of this key may ever leave a device of `role`.
    public func replicates(from role: DeviceRole) -> Bool {
        policy != .never && availability.replicates(from: role)
    }

    /// The part of the declaration both peers must share, as one canonical
    /// line: name, availability, policy, encoding, family, resolver, value type
    /// and security. Only the legacy name is a local matter.
    var wireDeclaration: String {
        "\(name)|\(availability.rawValue)|\(policy.rawValue)|\(encoding)|\(isFamily ? "family" : "single")|\(resolver ?? "lww")|\(valueType ?? "untyped")|\(security.rawValue)"
    }

    public var description: String {
        "\(name) (\(valueType.map { "\($0), " } ?? "")\(availability.rawValue), \(policy.rawValue)\(security == .encrypted ? ", encrypted" : "")\(isFamily ? ", family" : ""))"
    }

    /// Checks the name: non-empty segments separated by `:`, no whitespace
    /// or control characters, at most 256 bytes.
    static func validate(name: String) throws {
        guard !name.isEmpty, name.utf8.count <= 256 else {
            throw SyncError(.invalidKey, "a key name must have 1 to 256 bytes")
        }
        for segment in name.split(separator: ":", omittingEmptySubsequences: false) where segment.isEmpty {
            throw SyncError(.invalidKey, "key name '\(name)' has an empty namespace segment; write names like 'health:daily:steps'")
        }
        if name.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }) {
            throw SyncError(.invalidKey, "key name '\(name.debugDescription)' contains whitespace or control characters")
        }
    }

    /// A value under this key's legacy name written with another serializer
    /// than this key declares is not moved (as `ReplacingStore` refuses it):
    /// the error a read of the key throws; the old value stays under its name.
    func legacySerializerMismatch(legacy: String, stored: String) -> SyncError {
        SyncError(.typeMismatch, "key '\(name)' has a value under its legacy name '\(legacy)' written with the \(stored) serializer, but declares \(encoding); "
            + "it was not moved: read it with a key of the old type and write it under the new one, or write or remove the new key (which retires it)")
    }
}

import Crypto
import Foundation

/// The set of keys a store knows, checked once when it is built: valid names,
/// no duplicates, resolvers present. Both peers must build the same registry.
public struct KeyRegistry: Sendable {
    /// One declaration. A class: every replicated entry looks its declaration
    /// up (two or three times on each side), and a copy is then one retain
    /// instead of one per string of the descriptor.
    final class Registered: Sendable, Equatable {
        let descriptor: KeyDescriptor
        let valueTypeName: String
        let resolver: ErasedResolver?

        init(descriptor: KeyDescriptor, valueTypeName: String, resolver: ErasedResolver?) {
            self.descriptor = descriptor
            self.valueTypeName = valueTypeName
            self.resolver = resolver
        }

        /// One declaration is one object: the same object, or not.
        static func == (a: Registered, b: Registered) -> Bool { a === b }
    }

    private var exact: [String: Registered] = [:]
    private var families: [String: Registered] = [:]
    /// The UTF-8 lengths of the family names: a ':' at any other offset ends no family name.
    private var familyNameLengths: Set<Int> = []
    /// Every declared key, in declaration order.
    public private(set) var descriptors: [KeyDescriptor] = []

    /// Builds a registry from typed keys. Two keys with one full name, or a
    /// key named as a family's member (`a:b` beside the family `a`), throw
    /// `.duplicateKey`, naming both declarations.
    public init(_ keys: [any KeyDeclaration]) throws {
        for key in keys {
            try add(Registered(descriptor: key.descriptor, valueTypeName: key.valueTypeName, resolver: key.erasedResolver))
        }
        try checkKeysInsideFamilies()
        try checkLegacyNames()
    }

    /// Builds a registry from untyped descriptors (e.g. a KEYS.json file);
    /// resolvers are looked up among the built-in ones, for the value type
    /// each descriptor names (`ErasedResolver.builtin(named:valueType:encoding:)`).
    public init(descriptors: [KeyDescriptor]) throws {
        for descriptor in descriptors {
            var resolver: ErasedResolver?
            if let name = descriptor.resolver {
                guard let builtin = ErasedResolver.builtin(named: name, valueType: descriptor.valueType, encoding: descriptor.encoding) else {
                    throw SyncError(.invalidKey, "key '\(descriptor.name)' names resolver '\(name)', which is not built in; use 'max' or 'union', or declare the key in code")
                }
                resolver = builtin
            }
            try add(Registered(descriptor: descriptor, valueTypeName: "JSON", resolver: resolver))
        }
        try checkKeysInsideFamilies()
        try checkLegacyNames()
    }

    /// No key is named where a member of a family would be (`a:b` beside the
    /// family `a`, or `a:b:c`, `a["b:c"]`): the member would address that key
    /// with the family's type and serializer. Throws `.duplicateKey` naming
    /// both. A nested family (`a:hours`, members `a:hours:<id>`) is no member.
    private func checkKeysInsideFamilies() throws {
        guard !families.isEmpty else { return }
        for d in descriptors where !d.isFamily {
            guard let family = family(forEntry: d.name), let key = exact[d.name] else { continue }
            let f = family.descriptor
            let id = String(decoding: d.name.utf8.dropFirst(f.name.utf8.count + 1), as: UTF8.self)
            throw SyncError(.duplicateKey, "key '\(d.name)' is named where a member of the family '\(f.name)' would be: \(family.valueTypeName) \(f) and \(key.valueTypeName) \(d); "
                + "'\(f.name)'[\"\(id)\"] would address the key with the family's type and serializer; give one of them another name")
        }
    }

    /// A legacy name names the one old key whose value moves over: no other
    /// key's legacy name. (It may still be declared: an app that keeps the old
    /// key for a while, e.g. for a watch on the older app, reads it on as before.)
    private func checkLegacyNames() throws {
        var movedTo: [String: String] = [:]
        for d in descriptors {
            guard let legacy = d.legacyName else { continue }
            if let other = movedTo[legacy] {
                throw SyncError(.invalidKey, "keys '\(other)' and '\(d.name)' both have the legacy name '\(legacy)'; an old value can move to one key only")
            }
            movedTo[legacy] = d.name
        }
    }

    private mutating func add(_ entry: Registered) throws {
        let d = entry.descriptor
        try KeyDescriptor.validate(name: d.name)
        if let legacy = d.legacyName {
            do {
                try KeyDescriptor.validate(name: legacy)
            } catch let error as SyncError {
                throw SyncError(.invalidKey, "key '\(d.name)' has an invalid legacy name: \(error.message)")
            }
            if legacy == d.name {
                throw SyncError(.invalidKey, "key '\(d.name)' gives its own name as its legacy name; a legacy name names the old key its value moves from")
            }
            // Every member of the family would read its value from that one old key: the first read moves it.
            if d.isFamily {
                throw SyncError(.invalidKey, "family '\(d.name)' has the legacy name '\(legacy)'; a legacy name moves one old value to one key, and every member of the family would take it; declare the legacy name on a key")
            }
        }
        if let existing = exact[d.name] ?? families[d.name] {
            throw SyncError(.duplicateKey, "two keys are named '\(d.name)': \(existing.valueTypeName) \(existing.descriptor) and \(entry.valueTypeName) \(d); give one of them another name")
        }
        // What crosses the wire must fit what a peer accepts (a key that never leaves the device need not).
        let crosses = d.replicates(from: .phone) || d.replicates(from: .watch)
        if crosses, d.encoding.utf8.count > SyncMessage.maxEncodingLength {
            throw SyncError(.invalidKey, "key '\(d.name)' has a serializer identifier of \(d.encoding.utf8.count) bytes; at most \(SyncMessage.maxEncodingLength) cross the wire")
        }
        // Peers compare declarations by the name before a line's first '|': a name holding one
        // would be compared as another name, and passed over (when declared otherwise) by neither.
        if crosses, d.name.utf8.contains(UInt8(ascii: "|")) {
            throw SyncError(.invalidKey, "key '\(d.name)' holds '|', which separates the fields of the declaration a peer compares; a key that replicates needs a name without it")
        }
        if crosses, d.wireDeclaration.utf8.count > SyncMessage.maxNameLength {
            throw SyncError(.invalidKey, "the declaration of key '\(d.name)' takes \(d.wireDeclaration.utf8.count) bytes (its value type is \(d.valueType ?? "-")); at most \(SyncMessage.maxNameLength) cross the wire")
        }
        if d.resolver != nil && entry.resolver == nil {
            throw SyncError(.invalidKey, "key '\(d.name)' names a resolver but none was supplied")
        }
        if d.isFamily {
            families[d.name] = entry
            familyNameLengths.insert(d.name.utf8.count)
        } else {
            exact[d.name] = entry
        }
        descriptors.append(d)
    }

    /// The `encoding`s a registry file may declare: `json` (the default), `string`, `data`.
    package static let fileEncodings = ["json", "string", "data"]

    /// Loads a registry file: `{"keys":[{"name":..., "availability":..., "policy":..., "security":...}]}`.
    /// A path that is not a regular file, a file over 16 MiB, a field no key
    /// declares or an `encoding` other than `json`, `string` or `data` throws `.invalidConfiguration`.
    /// So does a file that is not JSON or a field of the wrong type or value; the
    /// message names the file, the line and the field (`keys.json:3: field 'keys[1].policy': …`).
    public static func load(jsonFile path: String) throws -> KeyRegistry {
        // Only a regular file, of at most 16 MiB: a FIFO or `/dev/zero` is refused, not waited on or read without end.
        let data = try InputFile.read(path, limit: InputFile.registryLimit, what: "the key registry file \(path)")
        if let syntax = JSONSyntaxError(validating: data) {
            throw SyncError(.invalidConfiguration, "the key registry \(path):\(syntax.line): not valid JSON: \(syntax.message)")
        }
        struct File: Decodable { let keys: [KeyDescriptor] }
        // A misspelled field ("securty") would leave its key at the default: in plain text, syncing.
        if let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let keys = object["keys"] as? [Any] {
            let known = Set(["name", "availability", "policy", "security", "encoding", "family", "resolver", "legacyName", "type"])
            for (index, key) in keys.enumerated() {
                guard let fields = key as? [String: Any] else { continue }
                if let unknown = fields.keys.sorted().first(where: { !known.contains($0) }) {
                    throw SyncError(.invalidConfiguration, "the key registry \(path): key \(index + 1) (\(fields["name"].map { "\($0)" } ?? "unnamed")) has the field '\(unknown)', which no key declares; the fields are \(known.sorted().joined(separator: ", "))")
                }
                // As a scenario's keys: only the serializers a keys file can give values of (a null: below, with its line).
                if let encoding = fields["encoding"], !(encoding is NSNull), !((encoding as? String).map(KeyRegistry.fileEncodings.contains) ?? false) {
                    throw SyncError(.invalidConfiguration, "the key registry \(path): key \(index + 1) (\(fields["name"].map { "\($0)" } ?? "unnamed")) has the encoding '\(encoding)'; expected \(KeyRegistry.fileEncodings.joined(separator: ", ")) or none (json)")
                }
            }
        }
        do {
            return try KeyRegistry(descriptors: JSONDecoder().decode(File.self, from: data).keys)
        } catch let error as SyncError {
            throw error
        } catch let error as DecodingError {
            throw SyncError(.invalidConfiguration, describe(error, in: data, path: path))
        } catch {
            throw SyncError(.invalidConfiguration, "the key registry \(path) is not valid: \(error); expected {\"keys\":[{\"name\":...,\"availability\":...,\"policy\":...,\"security\":...}]}")
        }
    }

    /// A decoding error of the registry file `path` as a scenario file's: the
    /// file and line, the field, and what it must hold.
    private static func describe(_ error: DecodingError, in data: Data, path: String) -> String {
        let (codingPath, message): ([any CodingKey], String) = switch error {
        case .keyNotFound(let key, let context): (context.codingPath + [key], "is required")
        case .valueNotFound(_, let context): (context.codingPath, "must not be null")
        case .typeMismatch(let type, let context): (context.codingPath, "expected \(expectation(type))")
        case .dataCorrupted(let context): (context.codingPath, context.debugDescription)
        @unknown default: ([], "cannot be read")
        }
        let field = JSONLocator.fieldName(of: codingPath)
        let line = JSONLocator.line(of: codingPath, in: data)
        return "the key registry \(path):\(line): " + (field.isEmpty ? message : "field '\(field)': \(message)")
    }

    /// What a field of `type` holds, in JSON's words.
    private static func expectation(_ type: Any.Type) -> String {
        switch type {
        case is Bool.Type: "true or false"
        case is String.Type: "a string"
        case is [Any].Type, is [KeyDescriptor].Type: "an array"
        default: type == [String: Any].self ? "an object" : "a value of type \(type)"
        }
    }

    /// The declaration that governs the stored entry `entryKey`: the key
    /// itself, or the longest family whose name is a `:`-prefix of it.
    func registered(forEntry entryKey: String) -> Registered? {
        if !exact.isEmpty, let hit = exact[entryKey] { return hit }
        return family(forEntry: entryKey)
    }

    /// The longest family whose name is a `:`-prefix of `entryKey`, if any.
    private func family(forEntry entryKey: String) -> Registered? { family(forEntry: entryKey, onLookup: nil) }

    /// `family(forEntry:)`; `onLookup` is called for each prefix looked up in the families (tests count them).
    func family(forEntry entryKey: String, onLookup: (() -> Void)?) -> Registered? {
        guard !families.isEmpty else { return nil }
        // By UTF-8 bytes: a ':' byte is always the scalar ':' (a Character may join it to a
        // combining mark that follows, as in a member id starting with one, and hide it).
        // Only where a family name of that length could end: a peer's key may hold a ':'
        // every other byte, and a string made and looked up at each was quadratic work.
        let utf8 = entryKey.utf8
        var end = utf8.endIndex
        while let colon = utf8[..<end].lastIndex(of: UInt8(ascii: ":")) {
            end = colon
            guard familyNameLengths.contains(utf8.distance(from: utf8.startIndex, to: colon)) else { continue }
            onLookup?()
            if let family = families[String(decoding: utf8[..<colon], as: UTF8.self)] { return family }
        }
        return nil
    }

    /// `registered(forEntry:)` through `memo`, which remembers the last family
    /// prefix (the bytes before a key's last `:`) and what it resolved to: the
    /// keys of a batch are mostly members of one family, and a byte comparison
    /// then replaces making a string and a hash lookup per key. Same answers.
    func registered(forEntry entryKey: String, memo: inout FamilyLookupMemo) -> Registered? {
        if !exact.isEmpty, let hit = exact[entryKey] { return hit }
        guard !families.isEmpty else { return nil }
        var remembered: Registered??
        var seen: [UInt8]?
        entryKey.utf8.withContiguousStorageIfAvailable { bytes in
            // No ':' leaves no family to look in (as `registered(forEntry:)` finds).
            guard let colon = bytes.lastIndex(of: UInt8(ascii: ":")) else {
                remembered = .some(nil)
                return
            }
            let prefix = UnsafeBufferPointer(rebasing: bytes[..<colon])
            if memo.holds(prefix) {
                remembered = .some(memo.result)
            } else {
                seen = Array(prefix)
            }
        }
        if let remembered { return remembered }
        let found = family(forEntry: entryKey)
        if let seen { memo.remember(seen, found) }
        return found
    }

    /// The last family prefix `registered(forEntry:memo:)` resolved, for one
    /// registry and one run of lookups (a local variable beside a loop).
    struct FamilyLookupMemo {
        private var prefix: [UInt8]?
        fileprivate private(set) var result: Registered?

        init() {}

        fileprivate func holds(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            guard let prefix, prefix.count == bytes.count else { return false }
            return prefix.withUnsafeBufferPointer { mine in
                bytes.isEmpty || memcmp(mine.baseAddress!, bytes.baseAddress!, bytes.count) == 0
            }
        }

        fileprivate mutating func remember(_ bytes: [UInt8], _ found: Registered?) {
            prefix = bytes
            result = found
        }
    }

    /// The descriptor that governs `entryKey`, if any. `entryKey` may be in
    /// any Unicode normalization form: families are looked up by the UTF-8
    /// bytes of NFC names, so a name not found is looked up again in NFC
    /// ("cafe\u{301}:x" is a member of the family "café"); stored names are NFC already.
    public func descriptor(forEntry entryKey: String) -> KeyDescriptor? {
        if let found = registered(forEntry: entryKey) { return found.descriptor }
        let canonical = KeyName.canonical(entryKey)
        return canonical.utf8.elementsEqual(entryKey.utf8) ? nil : registered(forEntry: canonical)?.descriptor
    }

    /// The keys declaring each legacy name (at most one a name): whose
    /// absence a cache may hold only until a value comes under that name.
    var keysByLegacyName: [String: [String]] {
        var keys: [String: [String]] = [:]
        for d in descriptors where !d.isFamily {
            if let legacy = d.legacyName { keys[legacy, default: []].append(d.name) }
        }
        return keys
    }

    /// Declarations that replicate from `role`, as canonical lines, sorted.
    func wireDeclarations(from role: DeviceRole) -> [String] {
        descriptors.filter { $0.policy != .never && ($0.availability.replicates(from: role) || $0.availability.replicates(from: role.counterpart)) }
            .map(\.wireDeclaration).sorted()
    }

    /// SHA-256 over the declarations that may cross between the devices.
    func fingerprint(for role: DeviceRole) -> [UInt8] {
        KeyRegistry.fingerprint(of: wireDeclarations(from: role))
    }

    /// SHA-256 over declarations as `wireDeclarations` gives them (each line and a newline).
    static func fingerprint(of declarations: [String]) -> [UInt8] {
        var hasher = SHA256()
        for line in declarations {
            hasher.update(data: Array(line.utf8) + [0x0A])
        }
        return Array(hasher.finalize())
    }
}

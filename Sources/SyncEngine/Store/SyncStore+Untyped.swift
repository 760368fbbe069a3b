/// Untyped access by full key name, for tools and registries loaded from
/// files (`syncsim node`), where no `Key<Value>` exists in code.
extension SyncStore {
    /// Stores already-serialized bytes under `name` (a registered key or a
    /// family member), with the same checks and effects as a typed `set`.
    public func setEncoded(_ bytes: [UInt8], forKey name: String) throws {
        _ = try commitLocal([WriteBatch.Operation(key: name, descriptor: try registeredDescriptor(name), bytes: bytes, decoded: nil)])
    }

    /// Removes the value stored under `name`, leaving a tombstone.
    public func removeValue(forKey name: String) throws {
        _ = try commitLocal([WriteBatch.Operation(key: name, descriptor: try registeredDescriptor(name), bytes: nil, decoded: nil)])
    }

    /// The serialized bytes stored under `name`, or nil when absent. Read through the cache.
    public func encodedValue(forKey name: String) throws -> [UInt8]? {
        try checkOpen()
        _ = try registeredDescriptor(name)
        if let slot = cache.lookup(name) { return slot.bytes }
        return try rawValue(forKey: name)
    }

    private func registeredDescriptor(_ name: String) throws -> KeyDescriptor {
        guard let descriptor = registry.descriptor(forEntry: name) else {
            throw SyncError(.unknownKey, "key '\(name)' is not in this store's registry; add it to the keys file")
        }
        return descriptor
    }
}

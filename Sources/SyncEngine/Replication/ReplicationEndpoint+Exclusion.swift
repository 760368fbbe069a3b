/// Which keys a session passes over: undeclared, not replicating from this
/// device, or declared otherwise by the peer.
extension ReplicationEndpoint {
    /// Whether `key` stays out of this session: undeclared, not replicating from
    /// this device, or declared otherwise by the peer.
    func excluded(_ key: String) -> Bool {
        var lookups = KeyRegistry.FamilyLookupMemo()
        return excluded(key, registry: port.registry, role: port.role, mismatched: session.knownPeer?.mismatchedKeys ?? [], memo: &lookups)
    }

    /// `excluded(_:)` for a run of keys: the port's registry, role and the peer's
    /// mismatched names read once, each key's declaration looked up through `memo`.
    func excluded(_ key: String, registry: KeyRegistry, role: DeviceRole, mismatched: Set<String>,
                  memo: inout KeyRegistry.FamilyLookupMemo) -> Bool {
        guard let descriptor = registry.registered(forEntry: key, memo: &memo)?.descriptor else { return true }
        return !descriptor.replicates(from: role) || (!mismatched.isEmpty && mismatched.contains(descriptor.name))
    }
}

import SyncTransport

/// A peer's hello checked against ours, and the key declarations the two compare.
extension ReplicationSession {
    /// Checks a peer's hello against ours: common protocol version, a phone
    /// with a watch, distinct nodes, one pairing epoch; collects key mismatches.
    static func validate(local: Identity, peer hello: SyncMessage.Hello) -> Result<Peer, SyncError> {
        let low = max(local.protocolRange.lowerBound, hello.protocolRange.lowerBound)
        let high = min(local.protocolRange.upperBound, hello.protocolRange.upperBound)
        guard low <= high else {
            return .failure(SyncError(.handshakeFailed, "no common protocol version: ours \(local.protocolRange.lowerBound)...\(local.protocolRange.upperBound), peer \(hello.protocolRange.lowerBound)...\(hello.protocolRange.upperBound); update the older app"))
        }
        guard hello.role != local.role else {
            return .failure(SyncError(.handshakeFailed, "a \(local.role) pairs only with a \(local.role.counterpart), but the peer is also a \(hello.role)"))
        }
        guard hello.node != local.node else {
            return .failure(SyncError(.handshakeFailed, "the peer has this store's own node id \(String(local.node, radix: 16)); a store cannot sync with a copy of itself"))
        }
        guard hello.pairingEpoch == local.pairingEpoch else {
            return .failure(SyncError(.pairingMismatch, "the peer belongs to another pairing (epoch \(PeerText.escaped(hello.pairingEpoch, maxLength: 64)), ours \(local.pairingEpoch)); pair the devices again"))
        }
        let mismatched = hello.registryFingerprint == local.fingerprint ? [] : mismatchedKeys(local.declarations, hello.declarations)
        return .success(Peer(node: hello.node, role: hello.role, protocolVersion: high, mismatchedKeys: mismatched,
                             partialTransfers: hello.partialTransfers, registryFingerprint: hello.registryFingerprint))
    }

    /// Of `names`, those `declarations` declare: what is worth remembering of a
    /// peer's mismatches (a name only the peer declares has no rows here, and a
    /// buggy or hostile peer could send any number of them).
    static func declared(_ names: Set<String>, in declarations: [String]) -> Set<String> {
        let ours = Set(declarations.map(name(of:)))
        return names.filter(ours.contains)
    }

    /// The keys (declaration names) declared differently, or on one side only.
    static func mismatchedKeys(_ ours: [String], _ theirs: [String]) -> Set<String> {
        let ours = Dictionary(ours.map { (name(of: $0), $0) }, uniquingKeysWith: { a, _ in a })
        let theirs = Dictionary(theirs.map { (name(of: $0), $0) }, uniquingKeysWith: { a, _ in a })
        return Set(Set(ours.keys).union(theirs.keys).filter { ours[$0] != theirs[$0] })
    }

    private static func name(of declaration: String) -> String {
        String(declaration.prefix { $0 != "|" })
    }
}

import Logging

extension SyncStore {
    /// At open: seals the values kept in plaintext of keys the registry
    /// declares `encrypted` (a key made encrypted by an app update, whose
    /// value was written before). Their versions, lanes and sequence numbers
    /// stay: nothing changes for the peers or observers. A value that does
    /// not read (a damaged file) is left for a write to replace.
    func sealPlaintextOfEncryptedKeys() throws {
        guard let cipher else { return }
        let sealedKeys = registry.descriptors.filter { $0.security == .encrypted && $0.availability.isHeld(on: role) }
        guard !sealedKeys.isEmpty else { return }
        let plaintext = try database.read { conn -> [String] in
            let exact = try conn.statement("SELECT key FROM entries WHERE key = ?1 AND encrypted = 0 AND deleted = 0")
            // A family's members: the names after "<family>:" and before "<family>;" (';' follows ':').
            let members = try conn.statement("SELECT key FROM entries WHERE key > ?1 AND key < ?2 AND encrypted = 0 AND deleted = 0")
            var keys: [String] = []
            for descriptor in sealedKeys {
                let stmt = descriptor.isFamily ? members : exact
                stmt.reset()
                if descriptor.isFamily {
                    stmt.bind(1, descriptor.name + ":")
                    stmt.bind(2, descriptor.name + ";")
                } else {
                    stmt.bind(1, descriptor.name)
                }
                while try stmt.step() {
                    let key = stmt.string(0)
                    // Not a nested family or a key of its own that is not encrypted.
                    if registry.descriptor(forEntry: key)?.security == .encrypted { keys.append(key) }
                }
            }
            exact.reset()
            members.reset()
            return keys
        }
        guard !plaintext.isEmpty else { return }
        let sealed = try database.write { conn -> Int in
            let update = try conn.statement("UPDATE entries SET value = ?2, encrypted = 1, in_file = ?3 WHERE key = ?1")
            var count = 0
            for key in plaintext {
                guard let row = try loadRow(conn, key: key, valueFile: .ifReadable), !row.encrypted, !row.deleted,
                      let value = row.value else { continue }
                let placed = try valueStorage.place(try cipher.seal(value, keyName: key), deleted: false, key: key,
                                                    version: row.version, in: conn)
                update.reset()
                update.bind(1, key)
                update.bind(2, placed.column)
                update.bind(3, placed.inFile ? 1 : 0)
                try update.run()
                count += 1
            }
            return count
        }
        if sealed > 0 {
            logger.notice("sealed the plaintext values of keys now declared encrypted", metadata: ["count": "\(sealed)"])
        }
    }
}

import Foundation
import Logging
import SyncTransport

extension SyncStore {
    /// At open: seals the values kept in plaintext of keys the registry
    /// declares `encrypted` (a key made encrypted by an app update, whose
    /// value was written before). Their versions, lanes and sequence numbers
    /// stay: nothing changes for the peers or observers. A value that does
    /// not read (a damaged file) is left for a write to replace. The value
    /// under such a key's legacy name is sealed too (unless the old key is
    /// still declared); chunks of such a key staged in plaintext are dropped.
    ///
    /// The plaintext would stay in the file (free space of the pages its cells
    /// left, freed overflow pages, copies a page split left) and in the WAL
    /// until overwritten: the seal is written with `secure_delete` on, then
    /// `scrubAfterSealing` rewrites the file and empties the WAL. (Writes of
    /// encrypted keys put only sealed bytes in the file: no scrub for them.)
    func sealPlaintextOfEncryptedKeys() throws {
        defer { scrubAfterSealing() }
        guard let cipher else { return }
        try resealPlaintextValueFiles(cipher)
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
                // The value under the key's legacy name, which its first read moves over (unless the
                // old key is still declared, and not encrypted: the app keeps it, as it declares it).
                if let legacy = descriptor.legacyName, !descriptor.isFamily, registry.descriptor(forEntry: legacy) == nil {
                    exact.reset()
                    exact.bind(1, legacy)
                    while try exact.step() { keys.append(exact.string(0)) }
                }
            }
            exact.reset()
            members.reset()
            return keys
        }
        let plaintextChunks = try stagedPlaintextTransfers(cipher)
        guard !plaintext.isEmpty || !plaintextChunks.isEmpty else { return }
        let sealed = try database.write { conn -> Int in
            // What the seal frees (the plaintext's cells, its overflow pages) is zeroed, for this transaction only.
            let secureDelete = try conn.integer("PRAGMA secure_delete")
            try conn.execute("PRAGMA secure_delete=ON")
            defer { try? conn.execute("PRAGMA secure_delete=\(secureDelete)") }
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
            // Chunks staged in plaintext: dropped (the peer sends the value again, from its start).
            let drop = try conn.statement("DELETE FROM sync_chunks WHERE key = ?1 AND ver = ?2 AND node = ?3")
            for transfer in plaintextChunks {
                drop.reset()
                drop.bind(1, transfer.key)
                drop.bind(2, transfer.version.packed)
                drop.bind(3, Int64(transfer.version.node))
                try drop.run()
            }
            // In the seal's transaction: a scrub cut short (a full disk, a crash) runs again at the next open.
            // Only when something was sealed or dropped: a value that does not read is found at every open.
            if count > 0 || !plaintextChunks.isEmpty { try SyncStore.writeMeta(conn, SyncStore.scrubPendingMeta, "1") }
            return count
        }
        if !plaintextChunks.isEmpty {
            logger.notice("dropped the chunks staged in plaintext of keys now declared encrypted", metadata: ["transfers": "\(plaintextChunks.count)"])
        }
        if sealed > 0 {
            logger.notice("sealed the plaintext values of keys now declared encrypted", metadata: ["count": "\(sealed)"])
        }
    }

    /// The transfers of keys declared encrypted with a chunk staged in
    /// plaintext (before an app update declared the key encrypted): such a
    /// chunk never opens, so the transfer would never complete.
    private func stagedPlaintextTransfers(_ cipher: AtRestCipher) throws -> [(key: String, version: HLCTimestamp)] {
        try database.read { conn in
            let keys = try conn.statement("SELECT DISTINCT key FROM sync_chunks")
            var encrypted: [String] = []
            while try keys.step() {
                let key = keys.string(0)
                if let d = registry.descriptor(forEntry: key), d.security == .encrypted, d.availability.isHeld(on: role) { encrypted.append(key) }
            }
            keys.reset()
            guard !encrypted.isEmpty else { return [] }
            let chunks = try conn.statement("SELECT ver, node, data FROM sync_chunks WHERE key = ?1")
            var found: [(key: String, version: HLCTimestamp)] = []
            for key in encrypted {
                chunks.reset()
                chunks.bind(1, key)
                while try chunks.step() {
                    let version = HLCTimestamp(packed: chunks.int64(0), node: UInt32(truncatingIfNeeded: chunks.int64(1)))
                    guard (try? cipher.open(chunks.blob(2) ?? [], keyName: key)) == nil,
                          !found.contains(where: { $0.key == key && $0.version == version }) else { continue }
                    found.append((key, version))
                }
            }
            chunks.reset()
            return found
        }
    }

    /// Marks, in `sync_meta`, a store whose sealed rows' value files were checked for plaintext.
    static let valueFilesResealedMeta = "value_files_resealed"

    /// Once per store: a value file that still holds the plaintext under a
    /// row marked sealed is sealed again (at its version). Before the seal's
    /// file was renamed only after a durable note, a crash between the
    /// seal's commit and the rename left such a file: the value read as
    /// damaged and its plaintext stayed on disk. Such a file passes its
    /// checksum with the plaintext's size, where a sealed one is longer.
    ///
    /// A file that is there but cannot be read (no permission, a directory
    /// in its place) is not checked: the check is then not marked done, so
    /// the next open checks again, and a warning says how many were left.
    /// (A missing file holds no plaintext; a damaged one is a write's to replace.)
    private func resealPlaintextValueFiles(_ cipher: AtRestCipher) throws {
        guard let files = valueStorage as? ValueFiles, try meta(SyncStore.valueFilesResealedMeta) == nil else { return }
        // Each file left unchecked: its path (a digest of the key) and why.
        var unchecked: [String] = []
        let candidates = try database.read { conn -> [(key: String, version: HLCTimestamp)] in
            let rows = try conn.statement("SELECT key, ver, node, size FROM entries WHERE encrypted = 1 AND in_file = 1 AND deleted = 0")
            var found: [(key: String, version: HLCTimestamp)] = []
            while try rows.step() {
                let version = HLCTimestamp(packed: rows.int64(1), node: UInt32(truncatingIfNeeded: rows.int64(2)))
                let size = rows.int64(3)
                let path = files.path(key: rows.string(0), version: version)
                var info = stat()
                guard stat(path, &info) == 0 else {
                    if errno != ENOENT { unchecked.append("\(path): \(FileWrite.describe(errno))") }
                    continue
                }
                guard info.st_mode & S_IFMT == S_IFREG else {
                    unchecked.append("\(path): not a regular file")
                    continue
                }
                // The plaintext's size, with its trailer or (written before trailers) without.
                if Int64(info.st_size) == size + Int64(ValueFiles.trailerSize) || Int64(info.st_size) == size {
                    found.append((rows.string(0), version))
                }
            }
            rows.reset()
            return found
        }
        let resealed = try database.write { conn -> Int in
            var count = 0
            let row = try conn.statement("SELECT size FROM entries WHERE key = ?1 AND ver = ?2 AND node = ?3 AND encrypted = 1 AND in_file = 1 AND deleted = 0")
            for candidate in candidates {
                row.reset()
                row.bind(1, candidate.key)
                row.bind(2, candidate.version.packed)
                row.bind(3, Int64(candidate.version.node))
                guard try row.step() else { continue }
                let bytes: [UInt8]
                do {
                    bytes = try files.read(key: candidate.key, version: candidate.version)
                } catch let error as SyncError where error.code == .valueFileUnreadable {
                    // Its path, never the message (which names the key).
                    unchecked.append("\(files.path(key: candidate.key, version: candidate.version)): cannot be read")
                    continue
                } catch {
                    continue
                }
                guard Int64(bytes.count) == row.int64(0), (try? cipher.open(bytes, keyName: candidate.key)) == nil else { continue }
                _ = try valueStorage.place(try cipher.seal(bytes, keyName: candidate.key), deleted: false, key: candidate.key,
                                           version: candidate.version, in: conn)
                count += 1
            }
            row.reset()
            if unchecked.isEmpty { try SyncStore.writeMeta(conn, SyncStore.valueFilesResealedMeta, "1") }
            return count
        }
        if resealed > 0 {
            logger.notice("sealed again value files that held the plaintext of sealed values", metadata: ["count": "\(resealed)"])
        }
        if let first = unchecked.first {
            logger.warning("value files of sealed values that could not be read were not checked for plaintext; they are checked again at the next open",
                           metadata: ["count": "\(unchecked.count)", "first": "\(first)"])
        }
    }

    /// Marks, in `sync_meta`, a seal whose plaintext may still be in the file or its WAL.
    static let scrubPendingMeta = "plaintext_scrub_pending"

    /// After a seal (this open's, or one whose scrub was cut short): `VACUUM`
    /// with `secure_delete` on rewrites every page, so no free page or free
    /// space in a page keeps the plaintext, and a `TRUNCATE` checkpoint copies
    /// the WAL into the file and empties it. A scrub that fails (a full disk,
    /// another connection writing) is logged and runs again at the next open;
    /// a checkpoint another connection holds back is done when the file closes.
    func scrubAfterSealing() {
        do {
            guard try meta(SyncStore.scrubPendingMeta) != nil else { return }
            try database.read { conn in
                let secureDelete = try conn.integer("PRAGMA secure_delete")
                try conn.execute("PRAGMA secure_delete=ON")
                defer { try? conn.execute("PRAGMA secure_delete=\(secureDelete)") }
                try conn.execute("VACUUM")
            }
            try database.write { conn in try SyncStore.deleteMeta(conn, SyncStore.scrubPendingMeta) }
            let emptied = try database.read { conn in try conn.checkpointTruncating() }
            if !emptied {
                logger.notice("the WAL keeps the pages the seal replaced until the store closes: another connection reads the file")
            }
        } catch {
            logger.warning("clearing the plaintext of sealed values from the store file waits for the next open", metadata: ["error": "\(error)"])
        }
    }
}

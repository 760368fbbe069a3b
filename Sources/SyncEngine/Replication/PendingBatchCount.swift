/// Counting the batches a sync round will send (`batchSent` progress totals).
extension ReplicationPort {
    /// How many batches the changes for `peer` after `cursor` make, read as
    /// `pendingRows` reads them (large values, sent in chunks, are not
    /// batches; with `dropsDeletes`, batches of deletes only are not sent),
    /// and the stream position that reading reaches. Reads every pending row.
    package func pendingBatches(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int, dropsDeletes: Bool,
                                skip: (String, Int64) -> Bool) throws -> (batches: Int, through: Int64) {
        try pendingBatchesByReadingRows(for: peer, after: cursor, maxEntries: maxEntries, maxBytes: maxBytes, dropsDeletes: dropsDeletes, skip: skip)
    }

    /// `pendingBatches` by reading the rows with `pendingRows`, as a session sends them.
    package func pendingBatchesByReadingRows(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int, dropsDeletes: Bool,
                                             skip: (String, Int64) -> Bool) throws -> (batches: Int, through: Int64) {
        var batches = 0
        var position = cursor
        while true {
            let (fetched, scanned) = try pendingRows(for: peer, after: position, maxEntries: maxEntries, maxBytes: maxBytes, skip: skip)
            guard scanned > position else { break }
            position = scanned
            var rows = fetched
            if dropsDeletes { rows.removeAll { $0.entry.deleted } }
            if rows.isEmpty || (rows.count == 1 && rows[0].isLarge) { continue }
            batches += 1
        }
        return (batches, position)
    }
}

extension SyncStore {
    /// `pendingBatches` without reading a value: the batch limits depend on
    /// keys and sizes only, so one scan of those gives the same count.
    func pendingBatchCount(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int, dropsDeletes: Bool,
                           skip: (String, Int64) -> Bool) throws -> (batches: Int, through: Int64) {
        try database.read { conn in
            let stmt = try conn.statement("""
                SELECT e.key, e.change_seq, e.size, e.deleted, e.origin_peer
                FROM entries e
                WHERE e.change_seq > ?1 AND \(SyncStore.isSentCondition)
                ORDER BY e.change_seq
                """)
            stmt.bind(1, cursor)
            defer { stmt.reset() }
            var batches = 0
            var through = cursor
            // The batch being read: its rows, those that are not deletes, its bytes.
            var rows = 0, kept = 0, bytes = 0
            func close() {
                if rows > 0 && (!dropsDeletes || kept > 0) { batches += 1 }
                (rows, kept, bytes) = (0, 0, 0)
            }
            while try stmt.step() {
                let key = stmt.string(0)
                let seq = stmt.int64(1)
                through = seq
                if UInt32(truncatingIfNeeded: stmt.int64(4)) == peer || skip(key, seq) { continue }
                let size = stmt.byteCount(2)
                let deleted = stmt.int(3) != 0
                if !deleted && size > SyncStore.inlineValueLimit {
                    close()  // a large value ends the batch before it and goes alone, in chunks
                    continue
                }
                rows += 1
                if !deleted { kept += 1 }
                bytes += size + key.utf8.count + 32
                if rows >= maxEntries || bytes >= maxBytes { close() }
            }
            close()
            return (batches, through)
        }
    }
}

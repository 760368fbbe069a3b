import Crypto
import Foundation
import Synchronization
import SyncTransport

/// The directory of a store that keeps each value in its own file
/// (`FileValueStore`). A file is named by its key's hash and version, so a new
/// version never overwrites the committed one:
///
/// 1. the new file is written to a temporary name, flushed and renamed (atomic);
/// 2. the row that points at it commits in SQLite;
/// 3. only then is the previous version's file deleted.
///
/// A crash between 1 and 2 leaves an unreferenced file, removed at the next
/// open; a rolled-back transaction deletes its files at once. The same
/// version written again (a merge, a seal) is staged under a temporary name,
/// noted in `sync_meta` in the row's transaction and renamed after the
/// commit; a crash before the rename leaves the note, and the next open
/// renames the staged file (the committed row's bytes) then. Before a
/// committed transaction's files are renamed or deleted, its commit is put
/// on stable storage: a power cut never keeps the file change and rolls the
/// row back.
///
/// Each file ends with a trailer: `trailerMagic` and the CRC-32 of the bytes
/// before it, so damage that keeps a file's length is found when it is read
/// (`corrupt-value-file`). A file without the trailer (written before it
/// existed) is read as it is.
final class ValueFiles: Sendable {
    /// The first four bytes of a file's trailer; its last four are the CRC-32 (big-endian).
    static let trailerMagic: [UInt8] = Array("SYv1".utf8)
    static let trailerSize = 8

    let directory: String

    private struct Transaction {
        var written: [String] = []
        var superseded: [String] = []
        /// Files of a version written again (a resolver's merge keeps the
        /// version): staged under a temporary name, renamed over the
        /// committed file only once the row commits.
        var staged: [(file: String, target: String)] = []
    }
    private let transaction = Mutex(Transaction())
    /// Staged files renamed (or found gone) after their commit: their notes
    /// in `sync_meta` go in the next transaction that writes a value file.
    private let renamedStaged = Mutex<[String]>([])
    /// Staged files the open's recovery found committed, renamed once it commits.
    private let recoveredRenames = Mutex<[(file: String, target: String)]>([])
    /// Puts the commits made so far on stable storage.
    private let syncCommits: @Sendable () throws -> Void

    /// The `sync_meta` names of staged files to rename after their commit:
    /// this prefix and the staged file's name; the value is the target's name.
    static let stagedMetaPrefix = "value_file_staged:"

    /// Tests only: value directories whose committed transactions change no
    /// file, as if the process died right after the COMMIT.
    static let crashAfterCommitForTests = Mutex<Set<String>>([])

    init(directory: String, syncCommits: @escaping @Sendable () throws -> Void = {}) throws {
        self.directory = directory
        self.syncCommits = syncCommits
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw SyncError(.invalidConfiguration, "cannot create the value directory \(directory): \(error.localizedDescription); check the path and its permissions")
        }
    }

    /// The file name of `key` at `version`.
    static func fileName(key: String, version: HLCTimestamp) -> String {
        let digest = SHA256.hash(data: Array(key.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
        return "\(digest)-\(String(UInt64(bitPattern: version.packed), radix: 16))-\(String(version.node, radix: 16)).value"
    }

    func path(key: String, version: HLCTimestamp) -> String {
        directory + "/" + ValueFiles.fileName(key: key, version: version)
    }

    /// Writes `bytes` (already sealed when the key is encrypted) atomically and durably.
    func write(_ bytes: [UInt8], key: String, version: HLCTimestamp) throws {
        let target = path(key: key, version: version)
        let temporary = target + ".tmp-\(UInt32.random(in: 0...UInt32.max))"
        transaction.withLock { $0.written.append(target) }
        try durablyWrite(bytes, to: target, through: temporary)
    }

    /// Writes `bytes` for the version the committed row already has: to a
    /// staged file (durably), which replaces the committed file after the
    /// commit and goes after a rollback, so a rolled-back rewrite never
    /// touches the file the committed row points at. The staged file is
    /// noted in `sync_meta` in the same transaction: a crash between the
    /// commit and the rename leaves the note, and the next open renames it.
    func writeAgain(_ bytes: [UInt8], key: String, version: HLCTimestamp, in conn: SQLiteConnection) throws {
        let targetName = ValueFiles.fileName(key: key, version: version)
        let stagedName = targetName + ".tmp-staged-\(UInt32.random(in: 0...UInt32.max))"
        let staged = directory + "/" + stagedName
        transaction.withLock { $0.staged.append((staged, directory + "/" + targetName)) }
        try durablyWrite(bytes, to: staged, through: staged + "-\(UInt32.random(in: 0...UInt32.max))")
        // In the row's transaction: a crash after the commit, before the rename, leaves the note for the next open.
        let note = try conn.statement("INSERT INTO sync_meta(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
        note.bind(1, ValueFiles.stagedMetaPrefix + stagedName)
        note.bind(2, targetName)
        try note.run()
    }

    /// Deletes the notes of staged files renamed since (inside a write transaction).
    func forgetRenamedStaged(in conn: SQLiteConnection) throws {
        let names = renamedStaged.withLock { names -> [String] in
            defer { names.removeAll() }
            return names
        }
        guard !names.isEmpty else { return }
        let delete = try conn.statement("DELETE FROM sync_meta WHERE name = ?1")
        for name in names {
            delete.reset()
            delete.bind(1, ValueFiles.stagedMetaPrefix + name)
            try delete.run()
        }
    }

    private func durablyWrite(_ bytes: [UInt8], to target: String, through temporary: String) throws {
        do {
            try FileWrite.replace(target, with: Self.withTrailer(bytes), through: temporary)
        } catch {
            throw Self.fileError(error.code, error.creating ? "create" : "write", error.file)
        }
        syncDirectory()
    }

    private func syncDirectory() {
        let dir = open(directory, O_RDONLY)
        if dir >= 0 {
            fsync(dir)
            close(dir)
        }
    }

    /// The stored bytes of `key` at `version`. A missing file, or one whose
    /// bytes do not match its trailer's checksum, is `corrupt-value-file`; one
    /// that is there but cannot be read (no permission, a directory in its
    /// place) is `value-file-unreadable`, naming the file and the reason.
    func read(key: String, version: HLCTimestamp) throws -> [UInt8] {
        let file = path(key: key, version: version)
        let data: [UInt8]
        switch Self.contents(of: file) {
        case .success(let contents):
            data = contents
        case .failure(let failure) where failure.code == ENOENT:
            throw SyncError(.corruptValueFile, "the value file of key '\(PeerText.escaped(key))' is missing (\(file)); the entry's metadata is intact — restore the file or write the key again")
        case .failure(let failure):
            throw SyncError(.valueFileUnreadable, "the value file of key '\(PeerText.escaped(key))' is there but cannot be read (\(file): \(FileWrite.describe(failure.code))); it was left as it is and nothing was changed — fix its permissions, or move what is in its place, and try again")
        }
        guard let bytes = Self.withoutTrailer(data) else {
            throw SyncError(.corruptValueFile, "the value file of key '\(PeerText.escaped(key))' does not match its checksum (\(file) is damaged); restore the file or write the key again")
        }
        return bytes
    }

    /// An `errno` of a failed read.
    struct ReadFailure: Error {
        let code: Int32
    }

    /// The whole content of the file at `path`, or the `errno` that stopped
    /// the read (`ENOENT` when there is no file; `EACCES`, `EISDIR`, … when
    /// one is there but cannot be read).
    static func contents(of path: String) -> Result<[UInt8], ReadFailure> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(ReadFailure(code: errno)) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return .failure(ReadFailure(code: errno)) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(clamping: info.st_size))
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { readBytes(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(ReadFailure(code: errno))
            }
            if count == 0 { return .success(bytes) }
            bytes += buffer[..<count]
        }
    }

    /// `bytes` followed by the trailer.
    static func withTrailer(_ bytes: [UInt8]) -> [UInt8] {
        let crc = Checksum.crc32(bytes)
        var file = bytes
        file.reserveCapacity(bytes.count + trailerSize)
        file += trailerMagic
        file += [UInt8(truncatingIfNeeded: crc >> 24), UInt8(truncatingIfNeeded: crc >> 16), UInt8(truncatingIfNeeded: crc >> 8), UInt8(truncatingIfNeeded: crc)]
        return file
    }

    /// A file's bytes before its trailer; nil when the trailer's checksum does
    /// not match them. A file without a trailer is returned whole.
    static func withoutTrailer(_ file: [UInt8]) -> [UInt8]? {
        let end = file.count - trailerSize
        guard end >= 0, file[end..<end + 4].elementsEqual(trailerMagic) else { return file }
        let stored = file[(end + 4)...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let bytes = Array(file[..<end])
        return Checksum.crc32(bytes) == stored ? bytes : nil
    }

    /// Marks the file of a version that a write in this transaction replaces.
    func supersede(key: String, version: HLCTimestamp) {
        transaction.withLock { $0.superseded.append(path(key: key, version: version)) }
    }

    /// Deletes what the finished transaction made obsolete: replaced files after
    /// a commit, its own new files after a rollback.
    func transactionEnded(committed: Bool) {
        let finished = transaction.withLock { t -> Transaction in
            defer { t = Transaction() }
            return t
        }
        guard committed else {
            for (file, _) in finished.staged { unlink(file) }
            for file in finished.written { unlink(file) }
            return
        }
        guard !finished.staged.isEmpty || !finished.superseded.isEmpty else { return }
        if ValueFiles.crashAfterCommitForTests.withLock({ $0.contains(directory) }) { return }
        // The commit first on stable storage: a power cut that rolled the row back would
        // keep a rename (the version's bytes replaced) or a deletion (the file it points at).
        let durable = (try? syncCommits()) != nil
        var renamed: [String] = []
        for (file, target) in finished.staged where rename(file, target) == 0 || errno == ENOENT {
            // Gone: another process's open renamed it (its note is deleted there too).
            renamed.append(String(file.dropFirst(directory.count + 1)))
        }
        if !finished.staged.isEmpty { syncDirectory() }
        renamedStaged.withLock { $0 += renamed }
        // Replaced files stay when the commit could not be made durable: the next open removes them.
        if durable { for file in finished.superseded { unlink(file) } }
    }

    /// At open, in a write transaction: notes the staged files whose
    /// transaction committed (a crash came before their rename) over the
    /// files of rows that still point at them, for `renameRecovered()`;
    /// returns their names, which must stay. The notes of staged files gone
    /// are deleted.
    func stageCommittedRenames(referenced: Set<String>, in conn: SQLiteConnection) throws -> Set<String> {
        let notes = try conn.statement("SELECT name, value FROM sync_meta WHERE name > ?1 AND name < ?2")
        notes.bind(1, ValueFiles.stagedMetaPrefix)
        notes.bind(2, String(ValueFiles.stagedMetaPrefix.dropLast()) + ";")
        var found: [(name: String, stagedName: String, target: String)] = []
        while try notes.step() {
            let name = notes.string(0)
            found.append((name, String(name.dropFirst(ValueFiles.stagedMetaPrefix.count)), notes.string(1)))
        }
        notes.reset()
        var kept: Set<String> = []
        let delete = try conn.statement("DELETE FROM sync_meta WHERE name = ?1")
        for note in found {
            let staged = directory + "/" + note.stagedName
            if referenced.contains(note.target), !note.stagedName.contains("/"), !note.target.contains("/"),
               access(staged, F_OK) == 0 {
                kept.insert(note.stagedName)
                recoveredRenames.withLock { $0.append((staged, directory + "/" + note.target)) }
            } else {
                // Renamed already, or its row moved on: the file (if any) goes as unreferenced.
                delete.reset()
                delete.bind(1, note.name)
                try delete.run()
            }
        }
        return kept
    }

    /// After the open's recovery committed: puts the commits on stable
    /// storage and renames the staged files it found (their notes go with
    /// the next write of a value file, or at the next open).
    func renameRecovered() throws {
        let renames = recoveredRenames.withLock { r -> [(file: String, target: String)] in
            defer { r.removeAll() }
            return r
        }
        guard !renames.isEmpty else { return }
        try syncCommits()
        var renamed: [String] = []
        for (file, target) in renames {
            guard rename(file, target) == 0 || errno == ENOENT else { throw Self.fileError(errno, "rename", file) }
            renamed.append(String(file.dropFirst(directory.count + 1)))
        }
        syncDirectory()
        renamedStaged.withLock { $0 += renamed }
    }

    /// Deletes files no row points at (left by a crash before a commit).
    /// Call inside a write transaction, so no other process is mid-write.
    func removeUnreferenced(referenced: Set<String>) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where !referenced.contains(name) && (name.hasSuffix(".value") || name.contains(".value.tmp-")) {
            unlink(directory + "/" + name)
        }
    }

    static func sizeMismatch(key: String, found: Int, expected: Int) -> SyncError {
        SyncError(.corruptValueFile, "the value file of key '\(PeerText.escaped(key))' holds \(found) bytes where \(expected) were written; restore the file or write the key again")
    }

    /// A value file that could not be written: `storage-full` when the device is full.
    static func fileError(_ code: Int32, _ action: String, _ file: String) -> SyncError {
        if FileWrite.isStorageFull(code) {
            return SyncError(.storageFull, "the device's storage is full: cannot \(action) the value file \(file) (\(FileWrite.describe(code))); nothing of this change was stored — free space and try again")
        }
        return SyncError(.database, "cannot \(action) the value file \(file): \(FileWrite.describe(code)); check free space and permissions")
    }
}

/// `read(2)`, out of reach of `ValueFiles.read(key:version:)`'s name.
private func readBytes(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

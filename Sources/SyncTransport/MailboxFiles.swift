import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A spool folder (or its `refused/`), opened once and never through a
/// symbolic link: each file of it is named relative to the open folder, so
/// a peer that puts a link in the folder's place (it owns the spool it sends)
/// makes this side read, write, move or remove nothing outside the mailbox.
final class SpoolFolder {
    /// The folder's path, for messages.
    let path: String
    let descriptor: Int32

    /// Opens the spool folder at `path`. A symbolic link, file or FIFO there
    /// is replaced by a real, empty folder (a link removed, never what it
    /// points to); a folder missing throws `mailbox-io`.
    convenience init(_ path: String) throws {
        try self.init(path, name: path, at: AT_FDCWD, createsMissing: false) {
            try SpoolFolder.syncDirectory(at: AT_FDCWD, path: SpoolFolder.parent(of: path))
        }
    }

    /// Opens the folder `name` in `parent` (a spool's `refused/`), made anew
    /// where it is missing or something else (a link, a file, a FIFO) is in its place.
    convenience init(_ name: String, in parent: SpoolFolder) throws {
        try self.init(parent.path + "/" + name, name: name, at: parent.descriptor, createsMissing: true) { try parent.sync() }
    }

    private init(_ path: String, name: String, at parent: Int32, createsMissing: Bool, syncParent: () throws -> Void) throws {
        self.path = path
        // A few times: a peer may swap the folder for a link again between the replacement and the opening.
        for _ in 0..<4 {
            let descriptor = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if descriptor >= 0 {
                self.descriptor = descriptor
                return
            }
            let code = errno
            var info = stat()
            if fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 {
                if info.st_mode & S_IFMT == S_IFDIR {
                    throw TransportError(.mailboxIO, "cannot read the mailbox directory \(path): \(String(cString: strerror(code)))")
                }
                // What the peer put in the folder's place (a link, a file, a FIFO): removed, never followed or opened.
                guard unlinkat(parent, name, 0) == 0 || errno == ENOENT else {
                    throw TransportError(.mailboxIO, "\(path) is not a folder and cannot be removed (\(String(cString: strerror(errno)))), so no mailbox message can be kept in it")
                }
            } else if !createsMissing {
                throw TransportError(.mailboxIO, "cannot read the mailbox directory \(path): \(String(cString: strerror(code)))")
            }
            if mkdirat(parent, name, 0o700) != 0, errno != EEXIST {
                throw TransportError(.mailboxIO, "cannot create the mailbox directory \(path): \(String(cString: strerror(errno)))")
            }
            try syncParent()
        }
        throw TransportError(.mailboxIO, "\(path) keeps being replaced by something other than a folder; nothing was read or written in it")
    }

    deinit { close(descriptor) }

    /// The file named is not in the folder (any more): `read` and `move` of a file gone since the listing.
    struct Gone: Error {}

    /// Names in the folder (not `.` and `..`).
    func list() throws -> [String] {
        // A description of its own: `readdir` would otherwise share (and move) `descriptor`'s position.
        let own = openat(descriptor, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard own >= 0, let dir = fdopendir(own) else {
            let code = errno
            if own >= 0 { close(own) }
            throw TransportError(.mailboxIO, "cannot read the mailbox directory \(path): \(String(cString: strerror(code)))")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// What the file system says of `name` itself (a link is not followed), nil when nothing is there.
    func info(_ name: String) -> stat? {
        var info = stat()
        return fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 ? info : nil
    }

    /// Whether anything (a link too) is named `name`.
    func exists(_ name: String) -> Bool { info(name) != nil }

    /// The file `name` could not be opened or read (an I/O error, a lease another
    /// holds): `mailbox-io`, kept as `error`. A failure of this process rather than
    /// the file (out of descriptors or memory) is thrown as the `TransportError` itself.
    struct Unreadable: Error {
        let error: TransportError

        static func failure(_ code: Int32, _ what: String) -> any Error {
            let error = TransportError(.mailboxIO, "\(what): \(String(cString: strerror(code)))")
            return [EMFILE, ENFILE, ENOMEM, ENOBUFS].contains(code) ? error : Unreadable(error: error)
        }
    }

    /// The bytes of the regular file `name`, at most `limit`: anything else
    /// (a symbolic link, a folder, a FIFO, a socket, a device) is `not-a-message-file`,
    /// a larger file `oversized-frame`, no file `Gone`, a file that cannot be opened or read `Unreadable`.
    func read(_ name: String, limit: Int) throws -> [UInt8] {
        let filePath = path + "/" + name
        // Non-blocking: opening a FIFO for reading would wait for a writer. Never through a link.
        let file = openat(descriptor, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
        guard file >= 0 else {
            let code = errno
            // A link (`ELOOP`), a socket (`ENXIO`): no message, and it will never be one.
            if let info = info(name), info.st_mode & S_IFMT != S_IFREG {
                throw TransportError(.notAMessageFile, "\(filePath) is not a regular file (a symbolic link, a socket or a device), so no message")
            }
            if code == ENOENT, !exists(name) { throw Gone() }
            throw Unreadable.failure(code, "cannot open \(filePath)")
        }
        defer { close(file) }
        var info = stat()
        guard fstat(file, &info) == 0 else { throw Unreadable.failure(errno, "cannot inspect \(filePath)") }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw TransportError(.notAMessageFile, "\(filePath) is not a regular file (a directory, a FIFO or a device), so no message")
        }
        guard Int(clamping: info.st_size) <= limit else {
            throw TransportError(.oversizedFrame, "the mailbox file \(filePath) has \(info.st_size) bytes, over the \(limit)-byte limit")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(clamping: info.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { posixRead(file, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Unreadable.failure(errno, "cannot read \(filePath)")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }

    /// Writes `bytes` to `name` atomically: a temporary file, `fsync`,
    /// `rename` (a link when not `replacing`), `fsync` of the folder. False
    /// (nothing written) when not `replacing` and `name` exists.
    @discardableResult
    func writeAtomically(_ bytes: [UInt8], name: String, replacing: Bool = true) throws -> Bool {
        let temporary = ".tmp-\(name)-\(UInt32.random(in: 0...UInt32.max))"
        let file = openat(descriptor, temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard file >= 0 else { throw MailboxFiles.writeError(errno, writing: path + "/" + temporary, creating: true) }
        // Held while it is written: `removeLeftover` passes over a temporary file in use.
        _ = flock(file, LOCK_EX | LOCK_NB)
        var failure = FileWrite.writeAll(bytes, to: file)
        if failure == nil, fsync(file) != 0 { failure = errno }
        close(file)
        if failure == nil {
            if replacing {
                if renameat(descriptor, temporary, descriptor, name) != 0 { failure = errno }
            } else if linkat(descriptor, temporary, descriptor, name, 0) == 0 {
                unlinkat(descriptor, temporary, 0)
            } else if errno == EEXIST {
                unlinkat(descriptor, temporary, 0)
                return false
            } else if [EPERM, EOPNOTSUPP, ENOSYS].contains(errno) {
                // A file system without hard links: a rename, unless something is there already.
                if exists(name) {
                    unlinkat(descriptor, temporary, 0)
                    return false
                }
                if renameat(descriptor, temporary, descriptor, name) != 0 { failure = errno }
            } else {
                failure = errno
            }
        }
        if let failure {
            unlinkat(descriptor, temporary, 0)
            throw MailboxFiles.writeError(failure, writing: path + "/" + name)
        }
        try sync()
        return true
    }

    /// A decimal number in the small state file `name`, nil when missing,
    /// unreadable or beyond `MailboxFiles.maxRecordedSequence` (no spool gets
    /// near it: a damaged file, whose next sequence would leave the range a
    /// reader takes).
    func readNumber(_ name: String) -> UInt64? {
        guard case .number(let number)? = readState(name) else { return nil }
        return number
    }

    /// What a state file holds: a number a writer records, or something no writer writes.
    enum State: Equatable {
        case number(UInt64)
        /// What it holds instead, described (never its bytes as they are).
        case damaged(String)
    }

    /// The state file `name`: nil when missing or unreadable (not a regular file, or a read error).
    func readState(_ name: String) -> State? {
        guard let bytes = try? read(name, limit: 64) else { return nil }
        guard let text = String(validating: bytes, as: UTF8.self),
              let number = UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            return .damaged("\(bytes.count) bytes that are no decimal number")
        }
        guard number <= MailboxFiles.maxRecordedSequence else {
            return .damaged("\(number), past 2^61, the largest sequence a mailbox records")
        }
        return .number(number)
    }

    /// Writes `number` to the state file `name`, atomically and durably.
    func writeNumber(_ number: UInt64, name: String) throws {
        try writeAtomically(Array("\(number)\n".utf8), name: name)
    }

    /// Removes the temporary file `name` that a writer which died before its
    /// rename left, unless a writer still holds it (another `Mailbox` of this
    /// process writing it now).
    func removeLeftover(_ name: String) {
        let file = openat(descriptor, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
        if file >= 0 {
            defer { close(file) }
            guard flock(file, LOCK_EX | LOCK_NB) == 0 else { return }
        }
        remove(name)
    }

    /// Removes `name` (a link itself, never what it points to), if it is there.
    func remove(_ name: String) {
        unlinkat(descriptor, name, 0)
    }

    /// Moves `name` into `folder` as `target`; `Gone` when `name` is not there.
    func move(_ name: String, to folder: SpoolFolder, as target: String) throws {
        guard renameat(descriptor, name, folder.descriptor, target) == 0 else {
            if errno == ENOENT, !exists(name) { throw Gone() }
            throw TransportError(.mailboxIO, "cannot move \(path)/\(name) aside: \(String(cString: strerror(errno)))")
        }
    }

    /// Puts the folder's entries (names added, renamed, removed) on stable storage.
    func sync() throws {
        if fsync(descriptor) != 0, errno != EINVAL {
            throw TransportError(.mailboxIO, "cannot sync the directory \(path): \(String(cString: strerror(errno)))")
        }
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func syncDirectory(at parent: Int32, path: String) throws {
        let folder = openat(parent, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else {
            throw TransportError(.mailboxIO, "cannot open the directory \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(folder) }
        if fsync(folder) != 0, errno != EINVAL {
            throw TransportError(.mailboxIO, "cannot sync the directory \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// The names, numbers and errors of mailbox files: never trapping.
enum MailboxFiles {
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            throw TransportError(.mailboxIO, "cannot create the mailbox directory \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The highest sequence a message may carry: 2^62, beyond any number of
    /// messages (so that the next one never overflows; `readNumber`'s bound).
    static let maxSequence: UInt64 = 1 << 62

    /// The largest number a state file may hold, and the largest sequence a
    /// sender counts from: 2^61, which no spool gets near (a million messages
    /// a second for 73,000 years). A larger one is damage (a reader would have
    /// had to accept a message past it); taken as it is, it left the sender
    /// no sequence the reader takes below `maxSequence`, and delivery stopped.
    static let maxRecordedSequence: UInt64 = 1 << 61

    /// The highest sequence of the message files among `names` that a sender
    /// counts from (at most `maxRecordedSequence`), 0 when none.
    static func highestCountedSequence(named names: [String]) -> UInt64 {
        messageSequences(named: names).last { $0 <= maxRecordedSequence } ?? 0
    }

    /// The sequences of the message files among `names`, ascending: only
    /// names as `Mailbox.fileName` writes them (20 digits, 1 to `maxSequence`).
    static func messageSequences(named names: [String]) -> [UInt64] {
        names.compactMap(sequence(ofMessageNamed:)).sorted()
    }

    /// The sequence of a message file's name, nil unless `Mailbox.fileName` writes that name.
    static func sequence(ofMessageNamed name: String) -> UInt64? {
        guard name.utf8.count == 20 + Mailbox.messageSuffix.utf8.count, name.hasSuffix(Mailbox.messageSuffix) else { return nil }
        let digits = name.utf8.prefix(20)
        guard digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let sequence = UInt64(name.dropLast(Mailbox.messageSuffix.count)), sequence >= 1, sequence <= maxSequence else { return nil }
        return sequence
    }

    /// A name in a spool that looks like a message (`.msg`, not a temporary
    /// file) but is none that a sender writes.
    static func isMisnamedMessage(_ name: String) -> Bool {
        name.hasSuffix(Mailbox.messageSuffix) && !name.hasPrefix(".") && sequence(ofMessageNamed: name) == nil
    }

    /// `a + b`, or `Int.max` where that overflows (sizes a file system reports for sparse files).
    static func saturatingSum(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? Int.max : sum
    }

    /// Message files waiting in a spool (of `names`, its listing), and their bytes.
    static func spoolUsage(_ spool: SpoolFolder, names: [String]) -> (count: Int, bytes: Int) {
        var count = 0, bytes = 0
        for sequence in messageSequences(named: names) {
            if let info = spool.info(Mailbox.fileName(sequence)) {
                count += 1
                bytes = saturatingSum(bytes, max(0, Int(clamping: info.st_size)))
            }
        }
        return (count, bytes)
    }

    /// A mailbox file that could not be written: `storage-full` when the
    /// device is full, else `mailbox-io`.
    static func writeError(_ code: Int32, writing file: String, creating: Bool = false) -> TransportError {
        if FileWrite.isStorageFull(code) {
            return TransportError(.storageFull, "cannot write \(file): \(FileWrite.describe(code)); the device's storage is full — free space (nothing was posted or accepted)")
        }
        return TransportError(.mailboxIO, "cannot \(creating ? "create" : "write") \(file): \(FileWrite.describe(code))")
    }
}

/// The C `read`, out of reach of `SpoolFolder.read(_:limit:)`'s name.
private func posixRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

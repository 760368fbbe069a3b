import Crypto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The 32-byte secret two devices share once paired. Both ends of every
/// connection prove they hold it; it never travels and is never printed.
///
/// File format (`write(to:)` / `load(from:)`), mode 0600:
/// ```
/// syncengine-pairing-v1
/// <the 32 bytes in standard base64>
/// ```
/// `load` refuses a file whose mode grants any access to group or others
/// (it throws `.badSecretFile` saying to `chmod 600`): a secret that others
/// could read is no longer a secret.
public struct PairingSecret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The number of secret bytes.
    public static let byteCount = 32
    /// The first line of a secret file.
    public static let fileHeader = "syncengine-pairing-v1"

    let bytes: [UInt8]
    /// The id of this pairing (see `id`), derived once when the value is made:
    /// a listener looks hellos up by it, and a stranger may send hellos at will.
    private let derivedID: [UInt8]

    /// Wraps existing secret bytes; throws `.badSecretFile` unless there are exactly 32.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == Self.byteCount else {
            throw TransportError(
                .badSecretFile, "a pairing secret has \(Self.byteCount) bytes, this one has \(bytes.count)")
        }
        self.init(unchecked: bytes)
    }

    /// A new secret from the system's cryptographically secure generator.
    public static func generate() -> PairingSecret {
        let key = SymmetricKey(size: .bits256)
        return PairingSecret(unchecked: key.withUnsafeBytes { Array($0) })
    }

    private init(unchecked bytes: [UInt8]) {
        self.bytes = bytes
        derivedID = Self.deriveID(SymmetricKey(data: bytes))
    }

    /// The secret as a CryptoKit key.
    var symmetricKey: SymmetricKey { SymmetricKey(data: bytes) }

    /// A short, stable id of this pairing (16 hex digits: the first 8 bytes
    /// of SHA-256 over a domain label and the secret). Lets engines tell
    /// pairings apart without seeing the secret; reveals nothing usable about it.
    public var epoch: String {
        var hasher = SHA256()
        hasher.update(data: Array("syncengine-pairing-epoch-v1".utf8))
        hasher.update(data: bytes)
        return hex(Array(hasher.finalize().prefix(8)))
    }

    /// The number of bytes of `id`.
    public static let idByteCount = 16

    /// The id a dialer names its pairing by in its hello (`0xF5`), so that a
    /// listener holding several pairings (a phone with several watches) picks
    /// the right secret at once: the first 16 bytes of
    /// HMAC-SHA256(key: secret, "syncengine-pairing-id-v1"). It travels in the
    /// clear and is stable, like a network name: it tells an observer which
    /// connections belong to the same pairing, nothing about the secret.
    /// Derived once, when the secret is made.
    public var id: [UInt8] { derivedID }

    private static func deriveID(_ key: SymmetricKey) -> [UInt8] {
        idDerivations?.count.add(1, ordering: .relaxed)
        return Array(HMAC<SHA256>.authenticationCode(for: Array("syncengine-pairing-id-v1".utf8), using: key)
            .prefix(idByteCount))
    }

    /// Counts what the tasks of a scope (and the tasks they start) do: tests
    /// bind `idDerivations` (an HMAC each) or `folderSyncs` with `withValue`.
    final class Counter: Sendable {
        let count = Atomic<Int>(0)
        var value: Int { count.load(ordering: .relaxed) }
    }
    @TaskLocal static var idDerivations: Counter?
    /// Syncs of the secret file's folder made by `write(to:overwrite:)`.
    @TaskLocal static var folderSyncs: Counter?

    /// `PairingSecret(epoch: …)`: never the secret itself.
    public var description: String { "PairingSecret(epoch: \(epoch))" }
    /// Same as `description`.
    public var debugDescription: String { description }
    /// Shows only the epoch to `dump` and debuggers.
    public var customMirror: Mirror { Mirror(self, children: ["epoch": epoch]) }

    /// Constant-time comparison.
    public static func == (lhs: PairingSecret, rhs: PairingSecret) -> Bool {
        guard lhs.bytes.count == rhs.bytes.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.bytes.indices { difference |= lhs.bytes[index] ^ rhs.bytes[index] }
        return difference == 0
    }

    // MARK: Files

    /// Writes the secret to `path` with mode 0600. Refuses to replace an
    /// existing file unless `overwrite` is `true` (then it replaces it
    /// atomically, through a temporary file in the same folder), and never
    /// replaces what is not a regular file (a directory, a FIFO, a device
    /// such as `/dev/null`, or a symbolic link to one). Never writes through
    /// a symbolic link: `overwrite` replaces a link that leads nowhere or to a
    /// regular file with the secret file itself, and leaves its target alone.
    /// The file and its folder are synced before it returns (the secret
    /// survives a power cut); temporary files an earlier write left when its
    /// process died are removed (not those of a write under way: see
    /// `removeLeftoverTemporaries(of:)`).
    public func write(to path: String, overwrite: Bool = false) throws {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
            try Self.checkLink(at: path, overwrite: overwrite)
        } else if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
            throw TransportError(
                .badSecretFile,
                "\(path) is not a regular file (\(RegularFile.kind(of: info.st_mode))), so it cannot hold a pairing secret; give the path of a file")
        }
        Self.removeLeftoverTemporaries(of: path)
        let text = "\(Self.fileHeader)\n\(Data(bytes).base64EncodedString())\n"
        if overwrite {
            let (temporary, descriptor) = try Self.createLockedTemporary(for: path)
            // Locked until after the rename: a remover passes over it while this write is under way.
            defer { close(descriptor) }
            try Self.fill(descriptor, at: temporary, contents: Array(text.utf8), displayPath: path)
            guard rename(temporary, path) == 0 else {
                let code = errno
                unlink(temporary)
                throw TransportError(.badSecretFile, "cannot replace the pairing secret file \(path): \(Self.describe(code))")
            }
        } else {
            try Self.createFile(at: path, contents: Array(text.utf8), displayPath: path)
        }
        // The new name must reach stable storage too, or a power cut may take the file away.
        Self.folderSyncs?.count.add(1, ordering: .relaxed)
        if let failure = FileWrite.syncFolder(of: path) {
            throw TransportError(
                .badSecretFile,
                "the pairing secret file \(path) was written, but its folder could not be synced (\(Self.describe(failure))), "
                    + "so it may not survive a power cut; write it again with overwrite: true")
        }
    }

    /// Removes the temporary files (`PATH.tmp-N`, N a `UInt32` in decimal)
    /// that a `write(to:overwrite:)` of `path` left when its process died
    /// before the rename: copies of a secret, kept by nothing. A write holds
    /// an exclusive `flock` on its temporary file from its creation until
    /// after the rename, and the kernel drops it when the writer dies: a file
    /// whose lock cannot be taken is another write under way (another
    /// process's, or this one's) and stays. Any other name, and anything that
    /// is not a regular file, is left alone.
    static func removeLeftoverTemporaries(of path: String) {
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let prefix = (slash.map { String(path[path.index(after: $0)...]) } ?? path) + ".tmp-"
        guard prefix.count > 5, let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        for name in names where name.hasPrefix(prefix) {
            let number = name.dropFirst(prefix.count)
            guard let value = UInt32(number), String(value) == number else { continue }
            let leftover = folder == "/" ? "/" + name : folder + "/" + name
            // Non-blocking and not through a link: a FIFO under such a name must not hold the caller.
            let file = open(leftover, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
            guard file >= 0 else { continue }
            defer { close(file) }
            var opened = stat()
            guard fstat(file, &opened) == 0, opened.st_mode & S_IFMT == S_IFREG,
                  flock(file, LOCK_EX | LOCK_NB) == 0 else { continue }
            // Still the file the name leads to (not renamed into place by the write that just ended).
            if isFile(opened, named: leftover) { unlink(leftover) }
        }
    }

    /// Whether `name` leads to the file whose status is `opened` (not following a link).
    private static func isFile(_ opened: stat, named name: String) -> Bool {
        var named = stat()
        return lstat(name, &named) == 0 && named.st_dev == opened.st_dev && named.st_ino == opened.st_ino
    }

    /// Refuses the symbolic link at `path` unless `overwrite` may replace it
    /// (it leads nowhere, or to a regular file), saying where it points.
    private static func checkLink(at path: String, overwrite: Bool) throws {
        let link = "\(path) is a symbolic link to \((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "a target it cannot read")"
        let replace = "a pairing secret is never written through a link; pass overwrite: true to replace the link itself, or give the path of a file"
        var target = stat()
        guard stat(path, &target) == 0 else {
            let code = errno
            guard !overwrite else { return }
            throw TransportError(
                .badSecretFile,
                code == ENOENT ? "\(link), which does not exist; \(replace)" : "\(link), which cannot be followed (\(describe(code))); \(replace)")
        }
        guard target.st_mode & S_IFMT == S_IFREG else {
            throw TransportError(
                .badSecretFile,
                "\(link) (\(RegularFile.kind(of: target.st_mode))), not a regular file, so it cannot hold a pairing secret; give the path of a file")
        }
        guard overwrite else {
            throw TransportError(.badSecretFile, "\(link), a file; \(replace) (its target is left alone)")
        }
    }

    /// Creates a new `PATH.tmp-N` for a write of `path` and takes its `flock`
    /// (see `removeLeftoverTemporaries(of:)`), held until the descriptor is
    /// closed. A remover may open the new file before the lock is taken: when
    /// it holds the lock or the name no longer leads to the file, another name
    /// is tried. On a file system without `flock` the file is used unlocked.
    private static func createLockedTemporary(for path: String) throws -> (name: String, descriptor: Int32) {
        for _ in 0..<8 {
            let temporary = path + ".tmp-\(UInt32.random(in: 0...UInt32.max))"
            let descriptor = try createExclusive(temporary, displayPath: path)
            let locked = flock(descriptor, LOCK_EX | LOCK_NB) == 0
            // No locks here (ENOLCK, EOPNOTSUPP): used unlocked, as before the lock.
            if !locked, errno != EWOULDBLOCK, errno != EINTR { return (temporary, descriptor) }
            var opened = stat()
            if locked, fstat(descriptor, &opened) == 0, isFile(opened, named: temporary) { return (temporary, descriptor) }
            close(descriptor)  // a remover has it: it unlinks the name
        }
        throw TransportError(
            .badSecretFile, "cannot write the pairing secret file \(path): its temporary files kept being removed by another process")
    }

    /// Reads a secret written by `write(to:)` (through a symbolic link too).
    /// Throws `.badSecretFile` when the file is missing (a link to nothing is
    /// named as such), unreadable, readable by group or others, not in
    /// the `syncengine-pairing-v1` format, or not 32 bytes long. Removes the
    /// temporary files of writes whose process died before their rename,
    /// as `write(to:overwrite:)` does, never those of a write under way.
    public static func load(from path: String) throws -> PairingSecret {
        removeLeftoverTemporaries(of: path)
        let contents: [UInt8]
        do {
            contents = try RegularFile.read(path, limit: 4096, ownerOnly: true)
        } catch {
            switch error {
            case .missing:
                if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) {
                    throw TransportError(
                        .badSecretFile,
                        "\(path) is a symbolic link to \(target), which does not exist; point it at the pairing secret file, or give that file's path")
                }
                throw TransportError(
                    .badSecretFile,
                    "no pairing secret file at \(path); pair the devices first (PairingSecret.generate().write(to:))")
            case .unreadable(let reason):
                throw TransportError(.badSecretFile, "cannot read the pairing secret file \(path): \(reason)")
            case .notRegular(let kind):
                throw TransportError(.badSecretFile, "the pairing secret path \(path) is not a regular file (\(kind))")
            case .readableByOthers(let mode):
                throw TransportError(
                    .badSecretFile,
                    "the pairing secret file \(path) has mode 0\(String(mode, radix: 8)), so others may read it; "
                        + "run `chmod 600 \(path)` (or pair again if it may have leaked)")
            case .tooLarge(let size):
                throw TransportError(
                    .badSecretFile,
                    "the pairing secret file \(path) is too large to be one (\(size.map { "\($0) bytes" } ?? "more than 4096 bytes"))")
            }
        }
        return try parse(contents, path: path)
    }

    static func parse(_ contents: [UInt8], path: String) throws -> PairingSecret {
        let formatHint = "expected a line `\(fileHeader)` followed by one line of base64"
        guard let text = String(validating: contents, as: UTF8.self) else {
            throw TransportError(.badSecretFile, "the pairing secret file \(path) is not text; \(formatHint)")
        }
        // On any line end: `\r\n` is one Character, never split on "\n" (a file from Windows).
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        guard lines.first == fileHeader else {
            throw TransportError(
                .badSecretFile, "the pairing secret file \(path) does not start with `\(fileHeader)`; \(formatHint)")
        }
        let rest = lines.dropFirst().filter { !$0.isEmpty }
        guard rest.count == 1, let decoded = Data(base64Encoded: String(rest[rest.startIndex])) else {
            throw TransportError(.badSecretFile, "the pairing secret file \(path) is malformed; \(formatHint)")
        }
        guard decoded.count == byteCount else {
            throw TransportError(
                .badSecretFile,
                "the pairing secret in \(path) has \(decoded.count) bytes, expected \(byteCount); pair the devices again")
        }
        return PairingSecret(unchecked: Array(decoded))
    }

    private static func createFile(at path: String, contents: [UInt8], displayPath: String) throws {
        let descriptor = try createExclusive(path, displayPath: displayPath)
        defer { close(descriptor) }
        try fill(descriptor, at: path, contents: contents, displayPath: displayPath)
    }

    /// Creates the file at `path`, mode 0600, refusing one that exists.
    private static func createExclusive(_ path: String, displayPath: String) throws -> Int32 {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let code = errno
            if code == EEXIST {
                throw TransportError(
                    .badSecretFile,
                    "a pairing secret file already exists at \(displayPath); pass overwrite: true to replace it")
            }
            throw TransportError(.badSecretFile, "cannot create the pairing secret file \(displayPath): \(describe(code))")
        }
        return descriptor
    }

    /// Writes `contents` to the new file at `path` and syncs it; removes it on failure.
    private static func fill(_ descriptor: Int32, at path: String, contents: [UInt8], displayPath: String) throws {
        var failure: Int32?
        if fchmod(descriptor, 0o600) != 0 { failure = errno }
        var offset = 0
        while failure == nil, offset < contents.count {
            let written = contents[offset...].withUnsafeBytes { posixWrite(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno != EINTR { failure = errno }
            } else {
                offset += written
            }
        }
        if failure == nil, fsync(descriptor) != 0 { failure = errno }
        if let failure {
            unlink(path)
            throw TransportError(.badSecretFile, "cannot write the pairing secret file \(displayPath): \(describe(failure))")
        }
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

/// The C `write`, out of reach of `PairingSecret.write(to:)`'s name.
private func posixWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}

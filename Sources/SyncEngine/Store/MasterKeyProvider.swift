import Crypto
import Foundation

/// Keeps the store's 32-byte master key for `encrypted` keys somewhere safe.
///
/// The store asks for the key when it opens. When the provider has none and
/// the store holds no encrypted values yet, the store generates a random key
/// and hands it to ``storeMasterKey(_:)``; a store that already holds values
/// sealed with a key never gets a new one (`.encryptionKeyMissing`).
///
/// ``KeyFileMasterKeyProvider`` (a 0600 file) is the implementation used on
/// Linux and by `EncryptionKeySource.keyFile(path:)`; on Apple platforms an
/// app writes one over the Keychain (docs/APPLE.md shows it).
///
/// An error the provider throws fails the open with it when it is a
/// ``SyncError``, else with `.masterKeyUnavailable`; nothing is created or
/// changed in the store.
public protocol MasterKeyProvider: Sendable {
    /// The stored master key (32 bytes), or nil when none has been stored yet.
    func loadMasterKey() throws -> [UInt8]?
    /// Stores `newKey` (32 random bytes) as the master key and returns the key
    /// now stored: `newKey`, or a key another process stored first.
    /// Called only after ``loadMasterKey()`` returned nil, for a store that
    /// holds no encrypted values yet.
    func storeMasterKey(_ newKey: [UInt8]) throws -> [UInt8]
}

/// The master key in a 32-byte file (the Linux stand-in for the Keychain).
///
/// Created with mode 0600; a file that group or others may access, one that
/// is not a regular file, or one not 32 bytes long is refused with `.keyFile`.
public struct KeyFileMasterKeyProvider: MasterKeyProvider {
    /// The key file's path.
    public let path: String

    /// A provider for the key file at `path` (created only when a store needs a new key).
    public init(path: String) {
        self.path = path
    }

    public func loadMasterKey() throws -> [UInt8]? {
        try AtRestCipher.loadKeyFile(path)
    }

    /// Written whole to a temporary file first, synced, then linked to
    /// `path` (which fails if another process made it first) and the folder
    /// synced: a crash leaves no key file at all, never a partial one that
    /// every later open would refuse.
    public func storeMasterKey(_ newKey: [UInt8]) throws -> [UInt8] {
        let temporary = path + ".tmp-\(UInt32.random(in: 0...UInt32.max))"
        let fd = Foundation.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.cannotCreate(path, errno) }
        defer { unlink(temporary) }
        let written = newKey.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        let synced = written == newKey.count && fsync(fd) == 0
        let writeError = errno
        close(fd)
        guard synced else { throw SyncError(.keyFile, "cannot write the key file \(path): \(String(cString: strerror(writeError)))") }
        guard link(temporary, path) == 0 else {
            let linkError = errno
            // Another process created it meanwhile: use that one.
            if linkError == EEXIST, let key = try AtRestCipher.loadKeyFile(path) { return key }
            throw Self.cannotCreate(path, linkError)
        }
        let folder = Foundation.open((path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent,
                                     O_RDONLY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
        return newKey
    }

    /// Why the key file could not be made at `path`, in words: a symbolic
    /// link there (a key file is never made through one) is named as such.
    private static func cannotCreate(_ path: String, _ code: Int32) -> SyncError {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "a target it cannot read"
            return SyncError(.keyFile, "cannot create the key file \(path): it is a symbolic link to \(target), which does not exist; "
                                 + "a key file is never made through a link: remove the link, or point it at the store's key file")
        }
        return SyncError(.keyFile, "cannot create the key file \(path): \(String(cString: strerror(code))); check the folder exists and is writable")
    }
}

extension AtRestCipher {
    static let masterKeyByteCount = 32

    /// The master key from `provider`; a new one is made only when `mayCreate`
    /// (the store holds no values sealed with a key yet).
    static func masterKey(from provider: any MasterKeyProvider, mayCreate: Bool) throws -> SymmetricKey {
        let name = String(describing: type(of: provider))
        func attempt<T>(_ what: String, _ body: () throws -> T) throws -> T {
            do {
                return try body()
            } catch let error as SyncError {
                throw error
            } catch {
                throw SyncError(.masterKeyUnavailable, "the master key provider \(name) failed to \(what): \(error); nothing was created or changed")
            }
        }
        func checked(_ bytes: [UInt8]) throws -> SymmetricKey {
            guard bytes.count == masterKeyByteCount else {
                throw SyncError(.masterKeyUnavailable, "the master key provider \(name) gave a key of \(bytes.count) bytes, not \(masterKeyByteCount); nothing was created or changed")
            }
            return SymmetricKey(data: bytes)
        }
        if let existing = try attempt("load the key", { try provider.loadMasterKey() }) {
            return try checked(existing)
        }
        guard mayCreate else {
            let place = (provider as? KeyFileMasterKeyProvider).map { "the key file \($0.path) is missing" }
                ?? "the master key provider \(name) has no key"
            throw SyncError(.encryptionKeyMissing, "\(place), and this store holds values encrypted with the key it had; nothing was created or changed — restore that key (from a backup, or the Keychain it came from)")
        }
        let newKey = SymmetricKey(size: .bits256).withUnsafeBytes { [UInt8]($0) }
        return try checked(try attempt("store a new key", { try provider.storeMasterKey(newKey) }))
    }
}

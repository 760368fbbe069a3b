import Crypto
import _CryptoExtras
import Foundation

/// Where the store's master key for `encrypted` keys comes from.
public enum EncryptionKeySource: Sendable {
    /// A 32-byte key file (our stand-in for the Keychain). Created with mode
    /// 0600 for a store that holds no encrypted values yet; for one that does,
    /// a missing file throws `.encryptionKeyMissing` and nothing is created.
    /// A file that group or others may access is refused (`.keyFile`: `chmod 600`).
    /// Same as `.provider(KeyFileMasterKeyProvider(path:))`.
    case keyFile(path: String)
    /// A passphrase stretched with PBKDF2-SHA256 over the store's salt;
    /// `iterations` from 1 to `UInt32.max` (else `.invalidConfiguration`).
    case passphrase(String, iterations: Int = 210_000)
    /// A key kept by `provider` (on Apple platforms, one over the Keychain).
    case provider(any MasterKeyProvider)
}

/// Never prints a passphrase: `description`, `debugDescription` and `dump`
/// show `passphrase(<hidden>, iterations: N)`, as a `PairingSecret` hides its bytes.
extension EncryptionKeySource: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        switch self {
        case .keyFile(let path): "keyFile(path: \(path.debugDescription))"
        case .passphrase(_, let iterations): "passphrase(<hidden>, iterations: \(iterations))"
        case .provider(let provider): "provider(\(type(of: provider)))"
        }
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror { Mirror(self, children: ["source": description], displayStyle: .enum) }
}

/// AES-256-GCM for values of `encrypted` keys, with a per-store key derived
/// from the master key (HKDF-SHA256 over a random per-store salt). The key
/// name is authenticated data, so a ciphertext cannot be moved to another key.
struct AtRestCipher: Sendable {
    let key: SymmetricKey
    static let verifierPlaintext = Array("syncengine-at-rest-verifier-v1".utf8)

    /// `mayCreateKeyFile`: false for a store that already holds values sealed
    /// with its key (it has a verifier), so a missing key is an error.
    init(source: EncryptionKeySource, salt: [UInt8], mayCreateKeyFile: Bool) throws {
        let master: SymmetricKey
        switch source {
        case .keyFile(let path):
            master = try AtRestCipher.masterKey(from: KeyFileMasterKeyProvider(path: path), mayCreate: mayCreateKeyFile)
        case .provider(let provider):
            master = try AtRestCipher.masterKey(from: provider, mayCreate: mayCreateKeyFile)
        case .passphrase(let passphrase, let iterations):
            // PBKDF2 counts rounds in 32 bits: more would trap converting them.
            guard (1...Int(UInt32.max)).contains(iterations) else {
                throw SyncError(.invalidConfiguration, "PBKDF2 iterations must be from 1 to 4294967295, not \(iterations); the default is 210000")
            }
            master = try KDF.Insecure.PBKDF2.deriveKey(from: Array(passphrase.utf8), salt: salt, using: .sha256,
                                                       outputByteCount: 32, unsafeUncheckedRounds: iterations)
        }
        key = HKDF<SHA256>.deriveKey(inputKeyMaterial: master, salt: salt, info: Array("syncengine at-rest v1".utf8), outputByteCount: 32)
    }

    func seal(_ plaintext: [UInt8], keyName: String) throws -> [UInt8] {
        let box = try AES.GCM.seal(plaintext, using: key, authenticating: Array(keyName.utf8))
        guard let combined = box.combined else { throw SyncError(.decryptionFailed, "AES-GCM produced no combined box") }
        return [UInt8](combined)
    }

    func open(_ sealed: [UInt8], keyName: String) throws -> [UInt8] {
        do {
            let box = try AES.GCM.SealedBox(combined: sealed)
            return [UInt8](try AES.GCM.open(box, using: key, authenticating: Array(keyName.utf8)))
        } catch {
            throw SyncError(.decryptionFailed, "the encrypted value of key '\(keyName)' could not be decrypted: wrong master key or a damaged file; writing the key again replaces it")
        }
    }

    /// The key in the file at `path`; nil when there is no file. Refuses, as
    /// `PairingSecret.load` does, anything but a regular file that only its
    /// owner may access (mode & 0o077 == 0), and a file not 32 bytes long.
    static func loadKeyFile(_ path: String) throws -> [UInt8]? {
        // Non-blocking: opening a FIFO for reading would wait for a writer (the type is checked below).
        let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            throw SyncError(.keyFile, "the key file \(path) cannot be opened (errno \(code)); check its permissions")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw SyncError(.keyFile, "cannot inspect the key file \(path) (errno \(errno))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SyncError(.keyFile, "the key file path \(path) is not a regular file")
        }
        let permissions = info.st_mode & 0o777
        guard permissions & 0o077 == 0 else {
            throw SyncError(.keyFile, "the key file \(path) has mode 0\(String(permissions, radix: 8)), so others may read it; run `chmod 600 \(path)` (and replace the key if it may have leaked)")
        }
        var bytes = [UInt8](repeating: 0, count: 33)
        var count = 0
        while count < bytes.count {
            let n = bytes[count...].withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SyncError(.keyFile, "the key file \(path) cannot be read (errno \(errno)); check its permissions")
            }
            if n == 0 { break }
            count += n
        }
        guard count == 32 else {
            let size = count > 32 ? "more than 32 bytes" : "\(count) bytes"
            throw SyncError(.keyFile, "the key file \(path) holds \(size), not 32; it is not a SyncEngine key file")
        }
        return Array(bytes[0..<32])
    }
}

extension SyncStore {
    /// Up to `limit` values sealed at rest (key and sealed bytes, from rows or
    /// value files): what checks a master key when the verifier is lost.
    static func sealedSamples(_ database: Database, _ valueStorage: any ValueStorage, limit: Int = 3) throws -> [(key: String, sealed: [UInt8])] {
        let rows = try database.read { conn -> [(key: String, value: [UInt8]?, version: HLCTimestamp, inFile: Bool)] in
            let stmt = try conn.statement(
                "SELECT key, value, ver, node, in_file FROM entries WHERE encrypted = 1 AND deleted = 0 LIMIT \(max(1, limit))")
            defer { stmt.reset() }
            var rows: [(key: String, value: [UInt8]?, version: HLCTimestamp, inFile: Bool)] = []
            while try stmt.step() {
                rows.append((stmt.string(0), stmt.blob(1),
                             HLCTimestamp(packed: stmt.int64(2), node: UInt32(truncatingIfNeeded: stmt.int64(3))), stmt.int(4) != 0))
            }
            return rows
        }
        return rows.compactMap { row in
            guard let sealed = row.inFile ? try? valueStorage.readFile(key: row.key, version: row.version) : row.value else { return nil }
            return (row.key, sealed)
        }
    }
}

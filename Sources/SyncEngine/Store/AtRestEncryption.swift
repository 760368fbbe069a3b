import Crypto
import _CryptoExtras
import SyncTransport
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
    /// `iterations` from 1 to `UInt32.max`, and a passphrase that is not
    /// empty for a new store (else `.invalidConfiguration`).
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
            // An empty passphrase (a setting not loaded yet) seals with a key anyone derives: refused
            // for a store with no sealed values; one sealed so already still opens with it.
            guard !passphrase.isEmpty || !mayCreateKeyFile else {
                throw SyncError(.invalidConfiguration, "the passphrase is empty: values sealed with it would be open to anyone; give a passphrase")
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
            throw SyncError(.decryptionFailed, "the encrypted value of key '\(PeerText.escaped(keyName))' could not be decrypted: wrong master key or a damaged file; writing the key again replaces it")
        }
    }

    /// The key in the file at `path`; nil when there is no file. Refuses, as
    /// `PairingSecret.load` does, anything but a regular file that only its
    /// owner may access (mode & 0o077 == 0), and a file not 32 bytes long.
    static func loadKeyFile(_ path: String) throws -> [UInt8]? {
        let bytes: [UInt8]
        do {
            bytes = try RegularFile.read(path, limit: 32, ownerOnly: true)
        } catch {
            switch error {
            case .missing:
                return nil
            case .unreadable(let reason):
                throw SyncError(.keyFile, "the key file \(path) cannot be read: \(reason); check its permissions")
            case .notRegular(let kind):
                throw SyncError(.keyFile, "the key file path \(path) is not a regular file (\(kind))")
            case .readableByOthers(let mode):
                throw SyncError(.keyFile, "the key file \(path) has mode 0\(String(mode, radix: 8)), so others may read it; run `chmod 600 \(path)` (and replace the key if it may have leaked)")
            case .tooLarge:
                throw SyncError(.keyFile, "the key file \(path) holds more than 32 bytes, not 32; it is not a SyncEngine key file")
            }
        }
        guard bytes.count == 32 else {
            throw SyncError(.keyFile, "the key file \(path) holds \(bytes.count) bytes, not 32; it is not a SyncEngine key file")
        }
        return bytes
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

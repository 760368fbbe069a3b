import Crypto
import _CryptoExtras
import Foundation

/// Where the store's master key for `encrypted` keys comes from.
public enum EncryptionKeySource: Sendable {
    /// A 32-byte key file; created with mode 0600 when missing (our stand-in for the Keychain).
    case keyFile(path: String)
    /// A passphrase stretched with PBKDF2-SHA256 over the store's salt.
    case passphrase(String, iterations: Int = 210_000)
}

/// AES-256-GCM for values of `encrypted` keys, with a per-store key derived
/// from the master key (HKDF-SHA256 over a random per-store salt). The key
/// name is authenticated data, so a ciphertext cannot be moved to another key.
struct AtRestCipher: Sendable {
    let key: SymmetricKey
    static let verifierPlaintext = Array("syncengine-at-rest-verifier-v1".utf8)

    init(source: EncryptionKeySource, salt: [UInt8]) throws {
        let master: SymmetricKey
        switch source {
        case .keyFile(let path):
            master = try AtRestCipher.loadOrCreateKeyFile(path)
        case .passphrase(let passphrase, let iterations):
            guard iterations >= 1 else { throw SyncError(.invalidConfiguration, "PBKDF2 iterations must be at least 1") }
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
            throw SyncError(.decryptionFailed, "the encrypted value of a key could not be decrypted: wrong master key or a damaged file")
        }
    }

    static func loadOrCreateKeyFile(_ path: String) throws -> SymmetricKey {
        if FileManager.default.fileExists(atPath: path) {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw SyncError(.keyFile, "the key file \(path) cannot be read; check its permissions")
            }
            guard data.count == 32 else {
                throw SyncError(.keyFile, "the key file \(path) holds \(data.count) bytes, not 32; it is not a SyncEngine key file")
            }
            return SymmetricKey(data: data)
        }
        let key = SymmetricKey(size: .bits256)
        let bytes = key.withUnsafeBytes { [UInt8]($0) }
        let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else {
            throw SyncError(.keyFile, "cannot create the key file \(path) (errno \(errno)); check the folder exists and is writable")
        }
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, 32) }
        guard written == 32, fsync(fd) == 0 else {
            throw SyncError(.keyFile, "cannot write the key file \(path) (errno \(errno))")
        }
        return key
    }
}

import CSQLite
import Foundation
import Synchronization
@testable import SyncEngine
import Testing

/// A `MasterKeyProvider` keeping its key in memory, counting calls, that can
/// be told to fail (what an app's Keychain provider does when the device is locked).
final class MemoryKeyProvider: MasterKeyProvider {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    struct State {
        var key: [UInt8]?
        var loads = 0
        var stores: [[UInt8]] = []
        var loadFailure: (any Error)?
        var storeFailure: (any Error)?
        /// What `loadMasterKey` returns instead of the key, when set.
        var loadedInstead: [UInt8]?
    }

    let state: Mutex<State>

    init(key: [UInt8]? = nil) {
        state = Mutex(State(key: key))
    }

    func loadMasterKey() throws -> [UInt8]? {
        try state.withLock { state in
            state.loads += 1
            if let failure = state.loadFailure { throw failure }
            return state.loadedInstead ?? state.key
        }
    }

    func storeMasterKey(_ newKey: [UInt8]) throws -> [UInt8] {
        try state.withLock { state in
            if let failure = state.storeFailure { throw failure }
            state.stores.append(newKey)
            state.key = newKey
            return newKey
        }
    }
}

@Suite(.timeLimit(.minutes(5))) struct MasterKeyProviderTests {
    let folder = TempFolder()

    func open(_ source: EncryptionKeySource, file name: String = "s.sqlite") throws -> SyncStore {
        try SyncStore(path: folder.file(name), role: .phone, registry: try TestKeys.registry(), options: StoreOptions(encryption: source))
    }

    /// The store's `sync_meta.at_rest_verifier`, read with SQLite directly: set once a master key was accepted.
    func verifier(_ name: String = "s.sqlite") throws -> String? {
        var db: OpaquePointer?
        guard sqlite3_open_v2(folder.file(name), &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
            sqlite3_close(db)
            throw SyncError(.database, "cannot open \(name)")
        }
        defer { sqlite3_close(db) }
        var stmt: OpaquePointer?
        sqlite3_prepare_v2(db, "SELECT value FROM sync_meta WHERE name = 'at_rest_verifier'", -1, &stmt, nil)
        defer { sqlite3_finalize(stmt) }
        return sqlite3_step(stmt) == SQLITE_ROW ? String(cString: sqlite3_column_text(stmt, 0)) : nil
    }

    @Test func aCustomProvidersKeyIsTheMasterKey() async throws {
        let key = (0..<32).map { UInt8($0 * 7 % 256) }
        let provider = MemoryKeyProvider(key: key)
        let store = try open(.provider(provider))
        try await store.set("sealed with the provider's key", for: TestKeys.secret)
        store.close()
        #expect(provider.state.withLock { $0.loads } == 1)
        #expect(provider.state.withLock { $0.stores.isEmpty })

        // The same 32 bytes in a key file open it: they are the master key.
        let keyFile = folder.file("same.key")
        #expect(FileManager.default.createFile(atPath: keyFile, contents: Data(key), attributes: [.posixPermissions: 0o600]))
        let viaFile = try open(.keyFile(path: keyFile))
        #expect(try await viaFile.get(TestKeys.secret) == "sealed with the provider's key")
        viaFile.close()

        // Another provider's key is refused.
        #expect {
            _ = try open(.provider(MemoryKeyProvider(key: [UInt8](repeating: 9, count: 32))))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyWrong }
    }

    @Test func aProviderWithoutAKeyIsGivenOneOnlyForAStoreWithoutEncryptedValues() async throws {
        let provider = MemoryKeyProvider()
        let store = try open(.provider(provider))
        let stored = provider.state.withLock { $0.stores }
        #expect(stored.count == 1 && stored[0].count == 32)
        try await store.set("kept", for: TestKeys.secret)
        store.close()

        let again = try open(.provider(provider))
        #expect(try await again.get(TestKeys.secret) == "kept")
        again.close()
        #expect(provider.state.withLock { $0.stores.count } == 1)

        // The provider lost its key (a restored device without its Keychain):
        // the store holds values sealed with the old one, so no new key is made.
        provider.state.withLock { $0.key = nil }
        #expect {
            _ = try open(.provider(provider))
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .encryptionKeyMissing && error.message.contains("MemoryKeyProvider")
        }
        #expect(provider.state.withLock { $0.stores.count } == 1)
    }

    @Test func aFailingProviderFailsTheOpenWithAClearErrorAndChangesNothing() async throws {
        // A new store: a provider that cannot load, one that cannot store, one
        // with a key of the wrong size; none opens it, none leaves a verifier.
        let cannotLoad = MemoryKeyProvider()
        cannotLoad.state.withLock { $0.loadFailure = MemoryKeyProvider.Failure(description: "keychain locked (-25308)") }
        #expect {
            _ = try open(.provider(cannotLoad), file: "new.sqlite")
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .masterKeyUnavailable && error.message.contains("MemoryKeyProvider")
                && error.message.contains("keychain locked (-25308)")
        }
        #expect(cannotLoad.state.withLock { $0.stores.isEmpty })
        #expect(try verifier("new.sqlite") == nil)

        let cannotStore = MemoryKeyProvider()
        cannotStore.state.withLock { $0.storeFailure = MemoryKeyProvider.Failure(description: "no keychain access group") }
        #expect {
            _ = try open(.provider(cannotStore), file: "new.sqlite")
        } throws: { ($0 as? SyncError)?.code == .masterKeyUnavailable && "\($0)".contains("no keychain access group") }
        #expect(try verifier("new.sqlite") == nil)

        let short = MemoryKeyProvider(key: [UInt8](repeating: 1, count: 16))
        #expect {
            _ = try open(.provider(short), file: "new.sqlite")
        } throws: { ($0 as? SyncError)?.code == .masterKeyUnavailable && "\($0)".contains("16 bytes, not 32") }
        #expect(try verifier("new.sqlite") == nil)

        // A SyncError from the provider keeps its code.
        let own = MemoryKeyProvider()
        own.state.withLock { $0.loadFailure = SyncError(.keyFile, "the provider's own words") }
        #expect {
            _ = try open(.provider(own), file: "new.sqlite")
        } throws: { ($0 as? SyncError) == SyncError(.keyFile, "the provider's own words") }

        // A store that holds encrypted values: the failure changes nothing, the right key still opens it.
        let good = MemoryKeyProvider()
        let store = try open(.provider(good))
        try await store.set("still here", for: TestKeys.secret)
        store.close()
        let before = try verifier()
        #expect(before != nil)
        let failingLater = MemoryKeyProvider(key: good.state.withLock { $0.key })
        failingLater.state.withLock { $0.loadFailure = MemoryKeyProvider.Failure(description: "interaction not allowed") }
        #expect(throws: SyncError.self) { _ = try open(.provider(failingLater)) }
        #expect(try verifier() == before)
        let reopened = try open(.provider(good))
        #expect(try await reopened.get(TestKeys.secret) == "still here")
        reopened.close()
        #expect(good.state.withLock { $0.stores.count } == 1)
    }

    @Test func theKeyFileProviderIsTheKeyFileSource() async throws {
        let path = folder.file("master.key")
        let provider = KeyFileMasterKeyProvider(path: path)
        #expect(try provider.loadMasterKey() == nil)
        let store = try open(.provider(provider))
        try await store.set("via the provider", for: TestKeys.secret)
        store.close()
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try provider.loadMasterKey()?.count == 32)
        // The existing option reads the file the provider wrote.
        let viaOption = try open(.keyFile(path: path))
        #expect(try await viaOption.get(TestKeys.secret) == "via the provider")
        viaOption.close()
        // Storing when a file exists already keeps the existing key.
        let existing = try #require(try provider.loadMasterKey())
        #expect(try provider.storeMasterKey([UInt8](repeating: 3, count: 32)) == existing)
    }

    /// A store whose key check record (`at_rest_verifier`) was lost, opened with
    /// another master key: refused, since the key opens none of its sealed
    /// values. It took the new key and wrote a verifier for it, so the values
    /// sealed before no longer decrypted with either key.
    @Test func aLostVerifierStillRefusesAnotherKeyAndIsRewrittenForTheRightOne() async throws {
        let right = MemoryKeyProvider(key: (0..<32).map { UInt8($0 * 5 % 256) })
        let store = try open(.provider(right))
        try await store.set("sealed before the verifier was lost", for: TestKeys.secret)
        store.close()
        try deleteVerifier()

        #expect {
            _ = try open(.provider(MemoryKeyProvider(key: [UInt8](repeating: 3, count: 32))))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyWrong }
        #expect(try verifier() == nil, "nothing written for the wrong key")
        // A provider without a key is not given a new one: the store holds sealed values.
        let empty = MemoryKeyProvider()
        #expect {
            _ = try open(.provider(empty))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyMissing }
        #expect(empty.state.withLock { $0.stores.isEmpty })

        let reopened = try open(.provider(right))
        #expect(try await reopened.get(TestKeys.secret) == "sealed before the verifier was lost")
        reopened.close()
        #expect(try verifier() != nil, "the verifier is written again for the key that opens the values")
    }

    /// Deletes the store's `at_rest_verifier` row with SQLite directly (a damaged `sync_meta`).
    func deleteVerifier(_ name: String = "s.sqlite") throws {
        var db: OpaquePointer?
        defer { sqlite3_close(db) }
        guard sqlite3_open_v2(folder.file(name), &db, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK,
              sqlite3_exec(db, "DELETE FROM sync_meta WHERE name = 'at_rest_verifier'", nil, nil, nil) == SQLITE_OK,
              sqlite3_changes(db) == 1 else {
            throw SyncError(.database, "cannot delete the verifier of \(name)")
        }
    }
}

/// `.passphrase(_, iterations:)` above `UInt32.max` trapped the process
/// (swift-crypto converts the rounds with `UInt32(_:)`) instead of failing the open.
@Suite struct PassphraseIterationsTests {
    @Test func iterationsBeyondUInt32AreRefusedNotATrap() throws {
        let folder = TempFolder()
        let secret = Key<String>("pin", default: "", security: .encrypted)
        for iterations in [0, -1, Int(UInt32.max) + 1, Int.max] {
            #expect(throws: SyncError.self, "\(iterations)") {
                _ = try SyncStore(path: folder.file("s\(iterations).sqlite"), role: .phone, registry: try KeyRegistry([secret]),
                                  options: StoreOptions(encryption: .passphrase("correct horse", iterations: iterations)))
            }
            do {
                _ = try SyncStore(path: folder.file("s\(iterations).sqlite"), role: .phone, registry: try KeyRegistry([secret]),
                                  options: StoreOptions(encryption: .passphrase("correct horse", iterations: iterations)))
            } catch let error as SyncError {
                #expect(error.code == .invalidConfiguration && error.message.contains("4294967295"), "\(error)")
            }
        }
    }
}

/// A key file path naming a FIFO: the store's open waited for ever for a
/// writer (`open` without `O_NONBLOCK`) instead of refusing it as a key file
/// that is not a regular file (`key-file`), as the README says.
@Suite(.timeLimit(.minutes(5))) struct KeyFileFIFOTests {
    @Test func aFIFOKeyFileIsRefusedWithoutWaiting() async throws {
        let folder = TempFolder()
        let fifo = folder.file("master.key")
        try #require(mkfifo(fifo, 0o600) == 0)
        let secret = Key<String>("pin", default: "", security: .encrypted)
        let registry = try KeyRegistry([secret])
        let path = folder.file("s.sqlite")
        // On a thread of its own: an open that blocks must not hold a thread of the concurrency pool.
        let outcome: Result<Void, any Error>
        do {
            outcome = try await withDeadline("the open with a FIFO as key file to end") {
                await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
                    Thread.detachNewThread {
                        continuation.resume(returning: Result {
                            let store = try SyncStore(path: path, role: .phone, registry: registry,
                                                      options: StoreOptions(encryption: .keyFile(path: fifo)))
                            store.close()
                        })
                    }
                }
            }
        } catch {
            // Let the blocked open go (a writer that closes at once: it reads end of file).
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
            throw error
        }
        guard case .failure(let error) = outcome else {
            Issue.record("a store opened with a FIFO as its key file")
            return
        }
        #expect((error as? SyncError)?.code == .keyFile && "\(error)".contains("not a regular file"), "\(error)")
    }
}

/// `StoreOptions(encryption: .passphrase("…"))` printed the passphrase in
/// clear wherever the options were printed, logged or dumped, unlike a
/// `PairingSecret`, whose bytes never show.
@Suite struct PassphraseNotPrintedTests {
    @Test func neitherDescriptionNorDumpShowsThePassphrase() {
        let options = StoreOptions(encryption: .passphrase("hunter2-correct-horse", iterations: 1_000))
        var dumped = ""
        dump(options, to: &dumped)
        let source = EncryptionKeySource.passphrase("hunter2-correct-horse")
        var dumpedSource = ""
        dump(source, to: &dumpedSource)
        for text in ["\(options)", String(reflecting: options), dumped, "\(source)", String(reflecting: source), dumpedSource] {
            #expect(!text.contains("hunter2"), "\(text)")
        }
        #expect("\(source)".contains("passphrase"))
        #expect(String(reflecting: EncryptionKeySource.keyFile(path: "/k/master.key")).contains("/k/master.key"))
    }
}

/// A key file that cannot be opened was reported by its errno number
/// ("errno 20") where the pairing secret and the key registry give the
/// system's words; the three loaders now share one reader.
@Suite struct KeyFileErrorWordsTests {
    @Test func anUnopenableKeyFileIsReportedInWords() throws {
        let folder = TempFolder()
        let notAFolder = folder.file("plain")
        try Data("x".utf8).write(to: URL(fileURLWithPath: notAFolder))
        let secret = Key<String>("pin", default: "", security: .encrypted)
        let registry = try KeyRegistry([secret])
        do {
            let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry,
                                      options: StoreOptions(encryption: .keyFile(path: notAFolder + "/master.key")))
            store.close()
            Issue.record("a store opened with a key file under a regular file")
        } catch let error as SyncError {
            #expect(error.code == .keyFile, "\(error)")
            #expect(error.message.contains(String(cString: strerror(ENOTDIR))) && !error.message.contains("errno"), "\(error)")
        }
    }

    /// A key file path that is a link to nothing was reported as "cannot
    /// create the key file (errno 17); check the folder exists and is
    /// writable", though the folder was fine: the link is named now, and
    /// nothing is made through it.
    @Test func aDanglingLinkAsTheKeyFileIsNamed() throws {
        let folder = TempFolder()
        let keyPath = folder.file("master.key")
        let target = folder.file("elsewhere.key")
        try #require(symlink(target, keyPath) == 0)
        let registry = try KeyRegistry([Key<String>("pin", default: "", security: .encrypted)])
        do {
            let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry,
                                      options: StoreOptions(encryption: .keyFile(path: keyPath)))
            store.close()
            Issue.record("a store opened with a dangling link as its key file")
        } catch let error as SyncError {
            #expect(error.code == .keyFile, "\(error)")
            #expect(error.message.contains("symbolic link") && error.message.contains(target) && !error.message.contains("errno"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: target), "no key was made through the link")
    }

    @Test func aKeyFileOfTheWrongLengthSaysSo() throws {
        let folder = TempFolder()
        let secret = Key<String>("pin", default: "", security: .encrypted)
        let registry = try KeyRegistry([secret])
        for (length, words) in [(31, "holds 31 bytes"), (33, "more than 32 bytes"), (0, "holds 0 bytes")] {
            let keyPath = folder.file("k\(length).key")
            try Data(repeating: 7, count: length).write(to: URL(fileURLWithPath: keyPath))
            try #require(chmod(keyPath, 0o600) == 0)
            do {
                let store = try SyncStore(path: folder.file("s\(length).sqlite"), role: .phone, registry: registry,
                                          options: StoreOptions(encryption: .keyFile(path: keyPath)))
                store.close()
                Issue.record("a store opened with a \(length)-byte key file")
            } catch let error as SyncError {
                #expect(error.code == .keyFile && error.message.contains(words), "\(error)")
            }
        }
    }
}

import SyncTransport

/// The one error type of SyncEngine: a stable code plus a message that says
/// what happened and what to do. Messages never contain stored values or secrets.
public struct SyncError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, opaque code; match on it, never on the message.
    public struct Code: Hashable, Sendable, CustomStringConvertible, Codable {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
        public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            try c.encode(rawValue)
        }

        public static let database = Code("database")
        /// The file is not a SyncEngine store (not SQLite, or another program's SQLite file); it was left untouched.
        public static let notADatabase = Code("not-a-database")
        /// SQLite found the store's file damaged; this process writes nothing more to it.
        public static let databaseCorrupt = Code("database-corrupt")
        public static let schemaTooNew = Code("schema-too-new")
        public static let invalidKey = Code("invalid-key")
        public static let duplicateKey = Code("duplicate-key")
        public static let unknownKey = Code("unknown-key")
        public static let keyDeclarationMismatch = Code("key-declaration-mismatch")
        public static let writeNotAllowed = Code("write-not-allowed")
        public static let typeMismatch = Code("type-mismatch")
        public static let encodingFailed = Code("encoding-failed")
        public static let valueTooLarge = Code("value-too-large")
        public static let encryptionKeyMissing = Code("encryption-key-missing")
        public static let encryptionKeyWrong = Code("encryption-key-wrong")
        public static let decryptionFailed = Code("decryption-failed")
        public static let keyFile = Code("key-file")
        /// A `MasterKeyProvider` failed, or gave a key that is not 32 bytes; the store was not opened.
        public static let masterKeyUnavailable = Code("master-key-unavailable")
        /// A value file of a `FileValueStore` is missing or damaged; its metadata is intact.
        public static let corruptValueFile = Code("corrupt-value-file")
        /// A value file of a `FileValueStore` is there but cannot be read (no
        /// permission, a directory in its place, an I/O error). It was left as
        /// it is and nothing was changed: fix the file and try again.
        public static let valueFileUnreadable = Code("value-file-unreadable")
        /// Another process, or another `SyncStore` of this one, replicates this store file right now.
        public static let replicationLocked = Code("replication-locked")
        /// The replication lock file (`<store>.sync-lock`) could not be opened
        /// or locked: too many open files, no permission, not a regular file.
        /// Nothing was lost; the store stays local until it can be taken.
        public static let replicationLockUnavailable = Code("replication-lock-unavailable")
        public static let handshakeFailed = Code("handshake-failed")
        public static let pairingMismatch = Code("pairing-mismatch")
        public static let protocolViolation = Code("protocol-violation")
        public static let malformedMessage = Code("malformed-message")
        public static let notConnected = Code("not-connected")
        public static let timeout = Code("timeout")
        public static let closed = Code("closed")
        public static let invalidConfiguration = Code("invalid-configuration")
        /// The wall clock, or the clock's largest version, is outside what a version can hold.
        public static let clockOutOfRange = Code("clock-out-of-range")
        /// A remote entry's version is further ahead of this device's clock than
        /// `StoreOptions.maxRemoteClockAhead` allows (or its base is after its version).
        public static let versionOutOfRange = Code("version-out-of-range")

        // Codes a `TransportError` keeps when it becomes a `SyncError` (its own
        // `connect-failed` becomes `notConnected`).
        public static let truncatedFrame = Code("truncated-frame")
        public static let oversizedFrame = Code("oversized-frame")
        public static let badMagic = Code("bad-magic")
        public static let unsupportedVersion = Code("unsupported-version")
        public static let checksumMismatch = Code("checksum-mismatch")
        public static let decompressionFailed = Code("decompression-failed")
        public static let authenticationFailed = Code("authentication-failed")
        public static let badSecretFile = Code("bad-secret-file")
        /// A mailbox spool is full (`MailboxLimits`); the peer must read it first.
        public static let mailboxFull = Code("mailbox-full")
        /// A mailbox's files could not be created, read, written or moved.
        public static let mailboxIO = Code("mailbox-io")
        /// A mailbox message at or below the last accepted sequence: a replay.
        public static let replayedMessage = Code("replayed-message")
        /// A listener already holds `TCPConfiguration.maxUntakenConnections` connections nobody took.
        public static let tooManyConnections = Code("too-many-connections")
        /// The store already keeps `StoreOptions.maxKnownPeers` peers; a new node is refused.
        public static let tooManyPeers = Code("too-many-peers")
        /// A phone met the watch's node id through another pairing: the watch's
        /// store was copied from another watch's. The watch takes a new node id
        /// (`SyncStore.renewNodeID()`) and its next session syncs.
        public static let nodeIDConflict = Code("node-id-conflict")
        /// The device's storage is full: nothing of the change was stored, what
        /// was stored before is intact; it works again once space is freed.
        /// From a peer (its session ended with it): that device is full.
        public static let storageFull = Code("storage-full")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

extension SyncError {
    /// The transport's error with its code (`truncated-frame`,
    /// `authentication-failed`, …; a failed dial is `notConnected`) and its
    /// message, after `context` when given.
    public init(_ error: TransportError, context: String? = nil) {
        let code = error.code == .connectFailed ? Code.notConnected : Code(error.code.rawValue)
        self.init(code, context.map { "\($0): \(error.message)" } ?? error.message)
    }
}

extension SyncError {
    /// `closed`: the store at `path` was closed (`SyncStore.close()`).
    static func storeClosed(_ path: String) -> SyncError {
        SyncError(.closed, "the store at \(path) is closed; open it again")
    }
}

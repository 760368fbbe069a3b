/// An error of the transport: a stable code and a message that says what
/// happened and what to do. Never contains payload bytes or secrets.
public struct TransportError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, opaque error code that scripts and tests can match on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let closed = Code("closed")
        public static let truncatedFrame = Code("truncated-frame")
        public static let oversizedFrame = Code("oversized-frame")
        public static let badMagic = Code("bad-magic")
        public static let unsupportedVersion = Code("unsupported-version")
        public static let checksumMismatch = Code("checksum-mismatch")
        public static let decompressionFailed = Code("decompression-failed")
        public static let authenticationFailed = Code("authentication-failed")
        public static let decryptionFailed = Code("decryption-failed")
        public static let protocolViolation = Code("protocol-violation")
        public static let timeout = Code("timeout")
        public static let connectFailed = Code("connect-failed")
        public static let badSecretFile = Code("bad-secret-file")
        /// A mailbox spool holds as many messages or bytes as `MailboxLimits` allow.
        public static let mailboxFull = Code("mailbox-full")
        /// A mailbox's files could not be created, read, written or moved.
        public static let mailboxIO = Code("mailbox-io")
        /// A mailbox message at or below the last accepted sequence: a replay.
        public static let replayedMessage = Code("replayed-message")
        /// A listener holds `TCPConfiguration.maxUntakenConnections` authenticated connections nobody took.
        public static let tooManyConnections = Code("too-many-connections")
        /// The device's storage is full (`ENOSPC`, `EDQUOT`): a mailbox file could not be written.
        public static let storageFull = Code("storage-full")
        /// An entry of a mailbox spool named as a message that is no regular
        /// file (a directory, a FIFO, a device): set aside as refused.
        public static let notAMessageFile = Code("not-a-message-file")
        /// A setting the transport was given cannot work (a negative `MailboxLimits` field).
        public static let invalidConfiguration = Code("invalid-configuration")

        /// Whether no quick retry can succeed: the peer refused this device's
        /// pairing (`authentication-failed`: another pairing, or one it no longer
        /// holds) or shares no wire version with it (`unsupported-version`), and
        /// will refuse every attempt the same way until the devices are paired
        /// again or an app is updated (or the address answers with another
        /// device). `ReconnectingDialer` waits its policy's longest delay after
        /// these; every other code (refused, reset, timed out, too many
        /// connections) may pass, and backs off as usual.
        public var isPermanent: Bool { self == .authenticationFailed || self == .unsupportedVersion }

        /// Every code this build defines.
        static let all: [Code] = [
            .closed, .truncatedFrame, .oversizedFrame, .badMagic, .unsupportedVersion, .checksumMismatch,
            .decompressionFailed, .authenticationFailed, .decryptionFailed, .protocolViolation, .timeout,
            .connectFailed, .badSecretFile, .mailboxFull, .mailboxIO, .replayedMessage, .tooManyConnections,
            .storageFull, .notAMessageFile, .invalidConfiguration,
        ]
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

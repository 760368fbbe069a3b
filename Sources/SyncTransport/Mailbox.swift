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

/// Which device of a pairing an end of a mailbox is.
public enum MailboxRole: String, Sendable, CaseIterable, CustomStringConvertible {
    case phone
    case watch

    /// The other device of the pairing.
    public var counterpart: MailboxRole { self == .phone ? .watch : .phone }
    public var description: String { rawValue }
}

/// How much a mailbox spool (one direction) may hold before `post` refuses
/// with `mailbox-full`. `Int.max` in any field means no limit; a negative
/// one is refused by `Mailbox.init` (`invalid-configuration`).
public struct MailboxLimits: Sendable, Hashable {
    /// Messages waiting in one direction at most (acknowledgements may use `acknowledgementReserve` more).
    public var maxMessages: Int
    /// Bytes of waiting messages in one direction at most.
    public var maxBytes: Int
    /// The largest single message file, in bytes (a large value travels in one message).
    public var maxMessageBytes: Int
    /// Extra messages only `post(_:reserve:)` with `reserve: true` may use, so
    /// that acknowledgements still get through when both directions are full
    /// of changes.
    public var acknowledgementReserve: Int
    /// Files kept in an inbox's `refused/` folder at most (by count, and by
    /// bytes within `maxBytes`): the oldest go first, so a buggy or hostile
    /// peer cannot fill the disk with messages this side refuses.
    public var maxRefusedFiles: Int

    /// Defaults: 1024 messages, 256 MiB, 80 MiB per message (a value of
    /// `StoreOptions.maxValueSize`, 64 MiB, fits), 64 messages of reserve,
    /// 64 refused files kept.
    public init(maxMessages: Int = 1024, maxBytes: Int = 256 << 20, maxMessageBytes: Int = 80 << 20,
                acknowledgementReserve: Int = 64, maxRefusedFiles: Int = 64) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
        self.maxMessageBytes = maxMessageBytes
        self.acknowledgementReserve = acknowledgementReserve
        self.maxRefusedFiles = maxRefusedFiles
    }

    public static let `default` = MailboxLimits()

    /// Throws `invalid-configuration` naming every negative field.
    func validate() throws {
        let fields = [("maxMessages", maxMessages), ("maxBytes", maxBytes), ("maxMessageBytes", maxMessageBytes),
                      ("acknowledgementReserve", acknowledgementReserve), ("maxRefusedFiles", maxRefusedFiles)]
        let negative = fields.filter { $0.1 < 0 }.map { "MailboxLimits.\($0.0) is \($0.1)" }
        guard negative.isEmpty else {
            throw TransportError(
                .invalidConfiguration,
                negative.joined(separator: ", ") + "; a mailbox limit is 0 or more (Int.max for no limit)")
        }
    }
}

/// One message taken from the inbox: its sequence and its opened frame.
/// Hand it back to `Mailbox.accept(_:)` once it is dealt with (durably), or
/// to `setAside(_:because:)` when it cannot be.
public struct MailboxMessage: Sendable, Equatable {
    /// The sender's sequence number: strictly increasing per direction.
    public var sequence: UInt64
    /// The frame as the sender posted it.
    public var frame: Frame
    /// The spool file it came from.
    public var fileName: String
}

/// What `Mailbox.next()` found at the front of the inbox.
public enum MailboxDelivery: Sendable, Equatable {
    /// The next message, authenticated and in order.
    case message(MailboxMessage)
    /// A file that could not be accepted (another pairing, tampered, not a
    /// mailbox message, replayed, unreadable: `mailbox-io`). It was moved to the spool's `refused/`
    /// folder, next to a `.reason` file; nothing was deleted.
    case refused(fileName: String, error: TransportError)
}

/// Queued delivery between the two devices of a pairing, with
/// WatchConnectivity's `transferUserInfo` semantics: messages posted while
/// the peer is not running wait in a spool directory and are delivered, in
/// order, when it next reads.
///
/// Both devices open the same directory; each direction has its own spool:
/// ```
/// DIR/phone-to-watch/00000000000000000001.msg   sealed messages, by sequence
/// DIR/phone-to-watch/.tmp-…                     being written: never delivered
/// DIR/phone-to-watch/sender.state               the sender's next sequence
/// DIR/phone-to-watch/receiver.state             the highest sequence the receiver accepted
/// DIR/phone-to-watch/refused/                   files the receiver refused, with a .reason each
/// DIR/watch-to-phone/…                          the other direction, alike
/// ```
/// Each message is written atomically (temporary name, `fsync`, `rename`,
/// `fsync` of the directory) and sealed like a TCP frame: ChaCha20-Poly1305
/// under a key derived by HKDF-SHA256 from the pairing secret, a random salt
/// of the message, its direction and its sequence, so a message renamed,
/// replayed into the other direction or altered fails authentication. The
/// receiver durably records the highest sequence it accepted and refuses any
/// message at or below it (replay). A spool holds at most `MailboxLimits`;
/// `post` past them throws `mailbox-full`. A spool folder the peer replaced
/// by a symbolic link (or a file) is never followed: it becomes a real, empty folder again.
///
/// One process per device uses a mailbox at a time (`SyncPeer` holds the
/// store's replication lock); the two devices may run at different times.
public final class Mailbox: Sendable {
    /// The directory both devices share.
    public let directory: String
    /// This end's device.
    public let role: MailboxRole
    public let limits: MailboxLimits
    /// Epoch of the pairing (`PairingSecret.epoch`) that seals the messages.
    public let pairingEpoch: String
    private let secret: PairingSecret
    private let codec: FrameCodec
    private let nextSequence: Mutex<UInt64>
    /// Tests only: called by `next()` with the name of the message it is
    /// about to open (or move aside), after it saw the file was there.
    let beforeTakingHook = Mutex<(@Sendable (String) -> Void)?>(nil)
    /// Tests only: called by `post` on its thread with the name of the message
    /// it is about to write, before its file is created (a test blocks it there).
    package let beforeWritingHook = Mutex<(@Sendable (String) -> Void)?>(nil)

    /// The first bytes of every message file: "SYMB".
    public static let magic: [UInt8] = [0x53, 0x59, 0x4D, 0x42]
    /// The message file format version this build writes and reads.
    public static let formatVersion: UInt8 = 1
    /// Magic(4), format version(1), sender role(1), sequence(8), pairing id(16), salt(32).
    static let headerSize = 4 + 1 + 1 + 8 + PairingSecret.idByteCount + 32
    static let messageSuffix = ".msg"

    /// Opens (creating when missing) the mailbox in `directory` for `role`,
    /// sealed with `secret`, and removes the temporary files this end's
    /// writers left when they died before their rename. Throws `mailbox-io`
    /// when the directories cannot be created, `invalid-configuration` when
    /// a limit is negative.
    public init(directory: String, role: MailboxRole, secret: PairingSecret, limits: MailboxLimits = .default) throws {
        try limits.validate()
        self.directory = directory
        self.role = role
        self.secret = secret
        self.limits = limits
        self.pairingEpoch = secret.epoch
        // Saturating: `Int.max` (no limit of the app's own) must not overflow.
        let size = max(1024, limits.maxMessageBytes)
        codec = FrameCodec(limits: FrameLimits(maxFrameSize: size, maxInflatedSize: MailboxFiles.saturatingSum(size, size), compressionThreshold: 256))
        try MailboxFiles.makeDirectory(directory)
        var spools: [SpoolFolder] = []
        var refused: [SpoolFolder] = []
        for sender in [role, role.counterpart] {
            try MailboxFiles.makeDirectory(Self.spool(directory, from: sender))
            // A symbolic link the peer put in a spool's place is replaced, never followed (`SpoolFolder`).
            let spool = try SpoolFolder(Self.spool(directory, from: sender))
            refused.append(try SpoolFolder("refused", in: spool))
            spools.append(spool)
        }
        let outbox = spools[0]
        // Temporary files of this end's writers that died before their rename (each up to a
        // message, in no limit): the outbox's, but the peer's receiver.state; the inbox's receiver.state; refused/'s.
        let receiverTemporary = ".tmp-\(Self.receiverState)-"
        for name in try outbox.list() where name.hasPrefix(".tmp-") && !name.hasPrefix(receiverTemporary) { outbox.removeLeftover(name) }
        for name in try spools[1].list() where name.hasPrefix(receiverTemporary) { spools[1].removeLeftover(name) }
        for name in try refused[1].list() where name.hasPrefix(".tmp-") { refused[1].removeLeftover(name) }
        // Never reuse a sequence: the recorded next one, past any message still in the spool or already accepted.
        let recorded = outbox.readNumber(Self.senderState) ?? 1
        let accepted = outbox.readNumber(Self.receiverState) ?? 0
        let highest = MailboxFiles.highestCountedSequence(named: try outbox.list())
        nextSequence = Mutex(max(recorded, accepted + 1, highest + 1))
    }

    /// The spool of the messages `from` sends: `DIR/<from>-to-<other>`.
    public static func spool(_ directory: String, from sender: MailboxRole) -> String {
        directory + "/\(sender)-to-\(sender.counterpart)"
    }

    /// The spool at `path`, made again with the mailbox directory when it is
    /// missing (the directory was removed while this mailbox was in use), as
    /// `init` makes them: a removed directory must not stop delivery for as
    /// long as this object lives.
    private func spoolFolder(_ path: String) throws -> SpoolFolder {
        do {
            return try SpoolFolder(path)
        } catch {
            guard access(path, F_OK) != 0, errno == ENOENT else { throw error }
            try MailboxFiles.makeDirectory(directory)
            try MailboxFiles.makeDirectory(path)
            return try SpoolFolder(path)
        }
    }

    /// Where this end posts.
    public var outboxPath: String { Self.spool(directory, from: role) }
    /// Where this end reads.
    public var inboxPath: String { Self.spool(directory, from: role.counterpart) }

    // MARK: Sending

    /// Seals `frame` and writes it atomically as the next message of this
    /// end's spool; returns its sequence. Throws `mailbox-full` when the spool
    /// already holds `limits.maxMessages` messages (`+ acknowledgementReserve`
    /// with `reserve`) or `limits.maxBytes` bytes, `oversized-frame` when
    /// the message alone exceeds `limits.maxMessageBytes`, `mailbox-io` when
    /// the file system fails. Nothing is posted when it throws.
    @discardableResult
    public func post(_ frame: Frame, reserve: Bool = false) throws -> UInt64 {
        try nextSequence.withLock { next -> UInt64 in
            let outbox = try spoolFolder(outboxPath)
            let names = try outbox.list()
            // Another `Mailbox` of this spool (an app may make one for each message) may have posted
            // since this one last did: never a sequence the spool used (its message would be replaced,
            // or, once the peer took it, this one refused as a replay).
            var sequence = max(next, outbox.readNumber(Self.senderState) ?? 1, (outbox.readNumber(Self.receiverState) ?? 0) + 1,
                               MailboxFiles.highestCountedSequence(named: names) + 1)
            let waiting = MailboxFiles.spoolUsage(outbox, names: names)
            let maxMessages = MailboxFiles.saturatingSum(limits.maxMessages, reserve ? max(0, limits.acknowledgementReserve) : 0)
            // A few times: another `Mailbox` of this spool may take the same sequence at the same moment.
            for _ in 0..<8 {
                let bytes = try sealed(frame, sequence: sequence)
                guard bytes.count <= limits.maxMessageBytes else {
                    throw TransportError(
                        .oversizedFrame,
                        "a mailbox message of \(bytes.count) bytes exceeds the \(limits.maxMessageBytes)-byte limit (MailboxLimits.maxMessageBytes)")
                }
                guard waiting.count < maxMessages, MailboxFiles.saturatingSum(waiting.bytes, bytes.count) <= limits.maxBytes else {
                    throw TransportError(
                        .mailboxFull,
                        "the \(role)-to-\(role.counterpart) mailbox holds \(waiting.count) messages (\(waiting.bytes) bytes), "
                            + "at its limit of \(maxMessages) messages / \(limits.maxBytes) bytes; the \(role.counterpart) must read it first")
                }
                beforeWritingHook.withLock { $0 }?(Self.fileName(sequence))
                guard try outbox.writeAtomically(bytes, name: Self.fileName(sequence), replacing: false) else {
                    sequence += 1
                    continue
                }
                next = sequence + 1
                // The spool itself is proof enough of the sequence until the receiver takes it; the state file keeps it after.
                try outbox.writeNumber(next, name: Self.senderState)
                return sequence
            }
            throw TransportError(.mailboxIO, "another writer keeps taking the next sequence of \(outboxPath); nothing was posted")
        }
    }

    /// `frame` sealed as message `sequence` of this end, with its header.
    private func sealed(_ frame: Frame, sequence: UInt64) throws -> [UInt8] {
        let salt = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
        var sealer = FrameSealer(key: messageKey(from: role, sequence: sequence, salt: salt),
                                 version: FrameEnvelope.currentVersion, codec: codec)
        return header(from: role, sequence: sequence, salt: salt) + (try codec.encodeEnvelope(sealer.seal(frame)))
    }

    /// Messages of this end not yet taken by the peer (still in the outbox spool).
    public func outgoingCount() throws -> Int { MailboxFiles.messageSequences(named: try SpoolFolder(outboxPath).list()).count }

    /// This end's messages the peer has not taken yet, opened, in order
    /// (files that do not open are left out: they are the peer's to refuse).
    public func outgoingMessages() throws -> [MailboxMessage] { try outgoingMessages(after: 0) }

    /// `outgoingMessages()` of sequences above `sequence` only, but those in
    /// `skipping` (the others are not opened).
    package func outgoingMessages(after sequence: UInt64, skipping: Set<UInt64> = []) throws -> [MailboxMessage] {
        let outbox = try SpoolFolder(outboxPath)
        return MailboxFiles.messageSequences(named: try outbox.list()).filter { $0 > sequence && !skipping.contains($0) }.compactMap { sequence in
            let name = Self.fileName(sequence)
            guard let bytes = try? outbox.read(name, limit: limits.maxMessageBytes),
                  let frame = try? open(bytes, sequence: sequence, from: role) else { return nil }
            return MailboxMessage(sequence: sequence, frame: frame, fileName: name)
        }
    }

    /// Takes back a message of ours that the peer has not taken yet (as a
    /// sender cancels an outstanding transfer): its file goes from the spool.
    /// A peer that has begun to read it may still deliver it.
    public func withdraw(_ message: MailboxMessage) throws {
        let outbox = try SpoolFolder(outboxPath)
        outbox.remove(message.fileName)
        try outbox.sync()
    }

    /// Messages from the peer waiting in the inbox spool.
    public func incomingCount() throws -> Int { MailboxFiles.messageSequences(named: try SpoolFolder(inboxPath).list()).count }

    // MARK: Receiving

    /// The highest sequence this end accepted from the peer (0: none yet).
    public var acceptedSequence: UInt64 { (try? SpoolFolder(inboxPath))?.readNumber(Self.receiverState) ?? 0 }

    static let receiverState = "receiver.state"
    static let senderState = "sender.state"

    /// The next message from the peer, in sequence order, or nil when the
    /// inbox is empty. A file that cannot be accepted is moved to `refused/`
    /// and returned as `.refused`; call again for the next one. A message
    /// stays at the front (and is returned again) until `accept(_:)` or
    /// `setAside(_:because:)`. Temporary files are never looked at.
    public func next() throws -> MailboxDelivery? {
        // Opened once, never through a symbolic link: what is read, moved aside or pruned is in the spool.
        let inbox = try spoolFolder(inboxPath)
        // A state this end never writes (damaged, or the peer's doing) is set aside and reported; what
        // waits is taken from the first message on (what was accepted left the spool as it was).
        if case .damaged(let what)? = inbox.readState(Self.receiverState) {
            let error = TransportError(
                .mailboxIO,
                "\(inboxPath)/\(Self.receiverState) holds \(what): not a sequence this end records; set aside, and the messages waiting are taken in order")
            if try moveAside(Self.receiverState, error, in: inbox) { return .refused(fileName: Self.receiverState, error: error) }
        }
        let accepted = inbox.readNumber(Self.receiverState) ?? 0
        let names = try inbox.list()
        // A file gone since the listing (withdrawn by the sender, or removed) is passed over as if never
        // listed: the next one is read (`SpoolFolder.Gone`, an `ENOENT` on its opening or its move aside).
        // A name no sender writes (`1.msg`, `+1.msg`, a sequence past 2^62): refused, never read as another.
        for name in names where MailboxFiles.isMisnamedMessage(name) {
            let error = TransportError(
                .notAMessageFile,
                "\(name) is not the name of a mailbox message (20 digits, a sequence from 1 to 2^62, then \(Self.messageSuffix))")
            if try moveAside(name, error, in: inbox) { return .refused(fileName: name, error: error) }
        }
        for sequence in MailboxFiles.messageSequences(named: names) where inbox.exists(Self.fileName(sequence)) {
            let name = Self.fileName(sequence)
            beforeTakingHook.withLock { $0 }?(name)
            if sequence <= accepted {
                let error = TransportError(
                    .replayedMessage,
                    "mailbox message \(sequence) is at or below the last accepted one (\(accepted)): a replay or an already delivered copy; not delivered again")
                if try moveAside(name, error, in: inbox) { return .refused(fileName: name, error: error) }
                continue
            }
            let bytes: [UInt8]
            do {
                bytes = try inbox.read(name, limit: limits.maxMessageBytes)
            } catch is SpoolFolder.Gone {
                continue
            } catch let unreadable as SpoolFolder.Unreadable {
                // Else it is read again each round, and the messages behind it never come.
                let error = TransportError(.mailboxIO, "\(unreadable.error.message); set aside, and the messages behind it are taken")
                if try moveAside(name, error, in: inbox) { return .refused(fileName: name, error: error) }
                continue
            } catch let error as TransportError where error.code == .oversizedFrame || error.code == .notAMessageFile {
                if try moveAside(name, error, in: inbox) { return .refused(fileName: name, error: error) }
                continue
            }
            do {
                let frame = try open(bytes, sequence: sequence)
                return .message(MailboxMessage(sequence: sequence, frame: frame, fileName: name))
            } catch let error as TransportError {
                if try moveAside(name, error, in: inbox) { return .refused(fileName: name, error: error) }
            }
        }
        return nil
    }

    /// Records `message` as delivered (durably: it is never delivered again)
    /// and removes its file. The file goes first: a reader that dies in
    /// between leaves no copy behind to be mistaken for a replay.
    public func accept(_ message: MailboxMessage) throws {
        let inbox = try spoolFolder(inboxPath)
        inbox.remove(message.fileName)
        try inbox.sync()
        if message.sequence > inbox.readNumber(Self.receiverState) ?? 0 {
            try inbox.writeNumber(message.sequence, name: Self.receiverState)
        }
    }

    /// Refuses an authenticated message the layer above cannot use (another
    /// protocol version, another key registry): it is recorded as taken (the
    /// queue goes on) and its file kept in `refused/` with `reason`.
    public func setAside(_ message: MailboxMessage, because reason: String) throws {
        let inbox = try spoolFolder(inboxPath)
        if message.sequence > inbox.readNumber(Self.receiverState) ?? 0 {
            try inbox.writeNumber(message.sequence, name: Self.receiverState)
        }
        try moveAside(message.fileName, TransportError(.protocolViolation, reason), in: inbox)
    }

    /// Names of the files kept aside in the inbox's `refused/` folder.
    public func refusedFiles() throws -> [String] {
        try SpoolFolder("refused", in: SpoolFolder(inboxPath)).list().filter { !$0.hasSuffix(".reason") }.sorted()
    }

    // MARK: Format

    static func fileName(_ sequence: UInt64) -> String {
        let digits = String(sequence)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + messageSuffix
    }

    private func header(from sender: MailboxRole, sequence: UInt64, salt: [UInt8]) -> [UInt8] {
        var writer = ByteWriter()
        writer.writeRaw(Self.magic)
        writer.writeUInt8(Self.formatVersion)
        writer.writeUInt8(sender == .phone ? 0 : 1)
        writer.writeUInt64(sequence)
        writer.writeRaw(secret.id)
        writer.writeRaw(salt)
        return writer.bytes
    }

    /// HKDF-SHA256 over the pairing secret, salted with the message's random
    /// salt, bound to its direction, envelope version and sequence.
    private func messageKey(from sender: MailboxRole, sequence: UInt64, salt: [UInt8]) -> SymmetricKey {
        var info = ByteWriter()
        info.writeRaw(Array("syncengine-v1 mailbox \(sender)->\(sender.counterpart)".utf8))
        info.writeUInt8(FrameEnvelope.currentVersion)
        info.writeUInt64(sequence)
        return HKDF<SHA256>.deriveKey(inputKeyMaterial: secret.symmetricKey, salt: salt, info: info.bytes, outputByteCount: 32)
    }

    private func open(_ bytes: [UInt8], sequence: UInt64, from sender: MailboxRole? = nil) throws -> Frame {
        let sender = sender ?? role.counterpart
        guard bytes.count >= Self.headerSize else {
            throw TransportError(.truncatedFrame, "mailbox message \(sequence) has \(bytes.count) bytes, less than a header")
        }
        var reader = ByteReader(bytes)
        guard try reader.readRaw(count: 4) == Self.magic else {
            throw TransportError(.badMagic, "mailbox file \(Self.fileName(sequence)) is not a mailbox message")
        }
        let version = try reader.readUInt8()
        guard version == Self.formatVersion else {
            throw TransportError(
                .unsupportedVersion, "mailbox message \(sequence) has format version \(version); this build reads \(Self.formatVersion)")
        }
        let senderByte = try reader.readUInt8()
        guard senderByte == (sender == .phone ? 0 : 1) else {
            throw TransportError(.authenticationFailed, "mailbox message \(sequence) was not written by the \(sender)")
        }
        guard try reader.readUInt64() == sequence else {
            throw TransportError(.authenticationFailed, "mailbox message \(sequence) carries another sequence than its file name")
        }
        let pairingID = try reader.readRaw(count: PairingSecret.idByteCount)
        guard pairingID == secret.id else {
            throw TransportError(
                .authenticationFailed,
                "mailbox message \(sequence) is sealed with another pairing's secret (a device of another pairing, or the pairing was renewed); pair the devices again if they belong together")
        }
        let salt = try reader.readRaw(count: 32)
        let envelope = try codec.decodeEnvelope(Array(bytes[Self.headerSize...]))
        var opener = FrameOpener(key: messageKey(from: sender, sequence: sequence, salt: salt),
                                 version: FrameEnvelope.currentVersion, codec: codec)
        do {
            return try opener.open(envelope)
        } catch let error as TransportError where error.code == .decryptionFailed {
            throw TransportError(
                .decryptionFailed, "mailbox message \(sequence) failed authentication: altered, renamed or not sealed by our peer")
        }
    }

    /// Moves `name` to `refused/` next to a `.reason` file; false (nothing
    /// kept) when it is gone from the spool already.
    @discardableResult
    private func moveAside(_ name: String, _ error: TransportError, in inbox: SpoolFolder) throws -> Bool {
        // Made a real folder again where the peer, who owns the spool, put a link or removed it.
        let refused = try SpoolFolder("refused", in: inbox)
        var target = name
        var attempt = 1
        while refused.exists(target) {
            attempt += 1
            target = name + ".\(attempt)"
        }
        try refused.writeAtomically(Array("\(error)\n".utf8), name: target + ".reason")
        do {
            try inbox.move(name, to: refused, as: target)
        } catch is SpoolFolder.Gone {
            refused.remove(target + ".reason")
            try refused.sync()
            return false
        }
        try inbox.sync()
        pruneRefused(refused, keeping: target)
        try refused.sync()
        return true
    }

    /// Keeps `refused/` within `limits.maxRefusedFiles` files and `limits.maxBytes`
    /// bytes, removing the oldest others (with their reasons) and never `newest`,
    /// the file just refused. Best effort: a file that cannot be removed stays,
    /// and the next refusal tries again.
    private func pruneRefused(_ refused: SpoolFolder, keeping newest: String) {
        guard let names = try? refused.list() else { return }
        // Times and sizes as the file system gives them: a peer may set any (a year past 2262, a sparse file).
        var others: [(name: String, seconds: Int, nanoseconds: Int, size: Int)] = []
        var bytes = 0
        for name in names where !name.hasSuffix(".reason") && !name.hasPrefix(".tmp-") {
            guard let info = refused.info(name) else { continue }
            let size = max(0, Int(clamping: info.st_size))
            bytes = MailboxFiles.saturatingSum(bytes, size)
            if name != newest { others.append((name, Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec), size)) }
        }
        others.sort { ($0.seconds, $0.nanoseconds, $0.name) < ($1.seconds, $1.nanoseconds, $1.name) }
        var excess = others.count + 1 - max(1, limits.maxRefusedFiles)
        for file in others where excess > 0 || bytes > limits.maxBytes {
            refused.remove(file.name)
            refused.remove(file.name + ".reason")
            excess -= 1
            bytes -= min(bytes, file.size)
        }
    }
}

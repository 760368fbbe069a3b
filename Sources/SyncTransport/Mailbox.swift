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
/// with `mailbox-full`.
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
    /// mailbox message, replayed). It was moved to the spool's `refused/`
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
/// `post` past them throws `mailbox-full`.
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

    /// The first bytes of every message file: "SYMB".
    public static let magic: [UInt8] = [0x53, 0x59, 0x4D, 0x42]
    /// The message file format version this build writes and reads.
    public static let formatVersion: UInt8 = 1
    /// Magic(4), format version(1), sender role(1), sequence(8), pairing id(16), salt(32).
    static let headerSize = 4 + 1 + 1 + 8 + PairingSecret.idByteCount + 32
    static let messageSuffix = ".msg"

    /// Opens (creating when missing) the mailbox in `directory` for `role`,
    /// sealed with `secret`. Throws `mailbox-io` when the directories cannot be created.
    public init(directory: String, role: MailboxRole, secret: PairingSecret, limits: MailboxLimits = .default) throws {
        self.directory = directory
        self.role = role
        self.secret = secret
        self.limits = limits
        self.pairingEpoch = secret.epoch
        let size = max(1024, limits.maxMessageBytes)
        codec = FrameCodec(limits: FrameLimits(maxFrameSize: size, maxInflatedSize: size * 2, compressionThreshold: 256))
        for path in [directory, Self.spool(directory, from: role), Self.spool(directory, from: role.counterpart),
                     Self.spool(directory, from: role) + "/refused", Self.spool(directory, from: role.counterpart) + "/refused"] {
            try MailboxFiles.makeDirectory(path)
        }
        let outbox = Self.spool(directory, from: role)
        // Never reuse a sequence: the recorded next one, past any message still in the spool or already accepted.
        let recorded = MailboxFiles.readNumber(outbox + "/sender.state") ?? 1
        let accepted = MailboxFiles.readNumber(outbox + "/receiver.state") ?? 0
        let highest = try MailboxFiles.messageSequences(in: outbox).last ?? 0
        nextSequence = Mutex(max(recorded, accepted + 1, highest + 1))
    }

    /// The spool of the messages `from` sends: `DIR/<from>-to-<other>`.
    public static func spool(_ directory: String, from sender: MailboxRole) -> String {
        directory + "/\(sender)-to-\(sender.counterpart)"
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
            let sequence = next
            let salt = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
            var sealer = FrameSealer(key: messageKey(from: role, sequence: sequence, salt: salt),
                                     version: FrameEnvelope.currentVersion, codec: codec)
            let sealed = try codec.encodeEnvelope(sealer.seal(frame))
            var bytes = header(from: role, sequence: sequence, salt: salt)
            bytes += sealed
            guard bytes.count <= limits.maxMessageBytes else {
                throw TransportError(
                    .oversizedFrame,
                    "a mailbox message of \(bytes.count) bytes exceeds the \(limits.maxMessageBytes)-byte limit (MailboxLimits.maxMessageBytes)")
            }
            let waiting = try MailboxFiles.spoolUsage(outboxPath)
            let maxMessages = limits.maxMessages + (reserve ? limits.acknowledgementReserve : 0)
            guard waiting.count < maxMessages, MailboxFiles.saturatingSum(waiting.bytes, bytes.count) <= limits.maxBytes else {
                throw TransportError(
                    .mailboxFull,
                    "the \(role)-to-\(role.counterpart) mailbox holds \(waiting.count) messages (\(waiting.bytes) bytes), "
                        + "at its limit of \(maxMessages) messages / \(limits.maxBytes) bytes; the \(role.counterpart) must read it first")
            }
            try MailboxFiles.writeAtomically(bytes, directory: outboxPath, name: Self.fileName(sequence))
            next = sequence + 1
            // The spool itself is proof enough of the sequence until the receiver takes it; the state file keeps it after.
            try MailboxFiles.writeNumber(next, to: outboxPath + "/sender.state")
            return sequence
        }
    }

    /// Messages of this end not yet taken by the peer (still in the outbox spool).
    public func outgoingCount() throws -> Int { try MailboxFiles.messageSequences(in: outboxPath).count }

    /// This end's messages the peer has not taken yet, opened, in order
    /// (files that do not open are left out: they are the peer's to refuse).
    public func outgoingMessages() throws -> [MailboxMessage] {
        try MailboxFiles.messageSequences(in: outboxPath).compactMap { sequence in
            let name = Self.fileName(sequence)
            guard let bytes = try? MailboxFiles.read(outboxPath + "/" + name, limit: limits.maxMessageBytes),
                  let frame = try? open(bytes, sequence: sequence, from: role) else { return nil }
            return MailboxMessage(sequence: sequence, frame: frame, fileName: name)
        }
    }

    /// Takes back a message of ours that the peer has not taken yet (as a
    /// sender cancels an outstanding transfer): its file goes from the spool.
    /// A peer that has begun to read it may still deliver it.
    public func withdraw(_ message: MailboxMessage) throws {
        MailboxFiles.remove(outboxPath + "/" + message.fileName)
        try MailboxFiles.syncDirectory(outboxPath)
    }

    /// Messages from the peer waiting in the inbox spool.
    public func incomingCount() throws -> Int { try MailboxFiles.messageSequences(in: inboxPath).count }

    // MARK: Receiving

    /// The highest sequence this end accepted from the peer (0: none yet).
    public var acceptedSequence: UInt64 { MailboxFiles.readNumber(inboxPath + "/receiver.state") ?? 0 }

    /// The next message from the peer, in sequence order, or nil when the
    /// inbox is empty. A file that cannot be accepted is moved to `refused/`
    /// and returned as `.refused`; call again for the next one. A message
    /// stays at the front (and is returned again) until `accept(_:)` or
    /// `setAside(_:because:)`. Temporary files are never looked at.
    public func next() throws -> MailboxDelivery? {
        let accepted = acceptedSequence
        let names = try MailboxFiles.list(inboxPath)
        // A name no sender writes (`1.msg`, `+1.msg`, a sequence past 2^62): refused, never read as another.
        if let name = names.first(where: { MailboxFiles.isMisnamedMessage($0) }) {
            let error = TransportError(
                .notAMessageFile,
                "\(name) is not the name of a mailbox message (20 digits, a sequence from 1 to 2^62, then \(Self.messageSuffix))")
            try moveAside(name, error)
            return .refused(fileName: name, error: error)
        }
        // Withdrawn by the sender since the listing: the next one.
        guard let sequence = MailboxFiles.messageSequences(named: names).first(where: {
            MailboxFiles.exists(inboxPath + "/" + Self.fileName($0))
        }) else { return nil }
        let name = Self.fileName(sequence)
        let path = inboxPath + "/" + name
        if sequence <= accepted {
            let error = TransportError(
                .replayedMessage,
                "mailbox message \(sequence) is at or below the last accepted one (\(accepted)): a replay or an already delivered copy; not delivered again")
            try moveAside(name, error)
            return .refused(fileName: name, error: error)
        }
        let bytes: [UInt8]
        do {
            bytes = try MailboxFiles.read(path, limit: limits.maxMessageBytes)
        } catch let error as TransportError where error.code == .oversizedFrame || error.code == .notAMessageFile {
            try moveAside(name, error)
            return .refused(fileName: name, error: error)
        }
        do {
            let frame = try open(bytes, sequence: sequence)
            return .message(MailboxMessage(sequence: sequence, frame: frame, fileName: name))
        } catch let error as TransportError {
            try moveAside(name, error)
            return .refused(fileName: name, error: error)
        }
    }

    /// Records `message` as delivered (durably: it is never delivered again)
    /// and removes its file. The file goes first: a reader that dies in
    /// between leaves no copy behind to be mistaken for a replay.
    public func accept(_ message: MailboxMessage) throws {
        MailboxFiles.remove(inboxPath + "/" + message.fileName)
        try MailboxFiles.syncDirectory(inboxPath)
        if message.sequence > acceptedSequence {
            try MailboxFiles.writeNumber(message.sequence, to: inboxPath + "/receiver.state")
        }
    }

    /// Refuses an authenticated message the layer above cannot use (another
    /// protocol version, another key registry): it is recorded as taken (the
    /// queue goes on) and its file kept in `refused/` with `reason`.
    public func setAside(_ message: MailboxMessage, because reason: String) throws {
        if message.sequence > acceptedSequence {
            try MailboxFiles.writeNumber(message.sequence, to: inboxPath + "/receiver.state")
        }
        try moveAside(message.fileName, TransportError(.protocolViolation, reason))
    }

    /// Names of the files kept aside in the inbox's `refused/` folder.
    public func refusedFiles() throws -> [String] {
        try MailboxFiles.list(inboxPath + "/refused").filter { !$0.hasSuffix(".reason") }.sorted()
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

    private func moveAside(_ name: String, _ error: TransportError) throws {
        let refused = inboxPath + "/refused"
        try MailboxFiles.makeRealDirectory(refused)
        var target = name
        var attempt = 1
        while FileManager.default.fileExists(atPath: refused + "/" + target) {
            attempt += 1
            target = name + ".\(attempt)"
        }
        try MailboxFiles.writeAtomically(Array("\(error)\n".utf8), directory: refused, name: target + ".reason")
        guard rename(inboxPath + "/" + name, refused + "/" + target) == 0 else {
            throw TransportError(.mailboxIO, "cannot move \(inboxPath)/\(name) aside: \(String(cString: strerror(errno)))")
        }
        try MailboxFiles.syncDirectory(inboxPath)
        pruneRefused(refused, keeping: target)
        try MailboxFiles.syncDirectory(refused)
    }

    /// Keeps `refused/` within `limits.maxRefusedFiles` files and `limits.maxBytes`
    /// bytes, removing the oldest others (with their reasons) and never `newest`,
    /// the file just refused. Best effort: a file that cannot be removed stays,
    /// and the next refusal tries again.
    private func pruneRefused(_ refused: String, keeping newest: String) {
        guard let names = try? MailboxFiles.list(refused) else { return }
        // Times and sizes as the file system gives them: a peer may set any (a year past 2262, a sparse file).
        var others: [(name: String, seconds: Int, nanoseconds: Int, size: Int)] = []
        var bytes = 0
        for name in names where !name.hasSuffix(".reason") && !name.hasPrefix(".tmp-") {
            var info = stat()
            guard stat(refused + "/" + name, &info) == 0 else { continue }
            let size = max(0, Int(clamping: info.st_size))
            bytes = MailboxFiles.saturatingSum(bytes, size)
            if name != newest { others.append((name, Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec), size)) }
        }
        others.sort { ($0.seconds, $0.nanoseconds, $0.name) < ($1.seconds, $1.nanoseconds, $1.name) }
        var excess = others.count + 1 - max(1, limits.maxRefusedFiles)
        for file in others where excess > 0 || bytes > limits.maxBytes {
            unlink(refused + "/" + file.name)
            unlink(refused + "/" + file.name + ".reason")
            excess -= 1
            bytes -= min(bytes, file.size)
        }
    }
}

/// The file operations of a mailbox: durable, atomic, never trapping.
enum MailboxFiles {
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            throw TransportError(.mailboxIO, "cannot create the mailbox directory \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Makes `path` a folder again where the peer, who owns the spool, put a
    /// symbolic link (removed, never what it points to: refusing moved files
    /// into it and pruned it) or removed it. Anything else throws `mailbox-io`.
    static func makeRealDirectory(_ path: String) throws {
        var info = stat()
        if lstat(path, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFDIR { return }
            guard info.st_mode & S_IFMT == S_IFLNK, unlink(path) == 0 else {
                throw TransportError(.mailboxIO, "\(path) is not a folder, so no refused file can be kept in it")
            }
        }
        try makeDirectory(path)
    }

    /// Names in `directory` (not `.` and `..`).
    static func list(_ directory: String) throws -> [String] {
        guard let dir = opendir(directory) else {
            throw TransportError(.mailboxIO, "cannot read the mailbox directory \(directory): \(String(cString: strerror(errno)))")
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

    /// The highest sequence a message may carry: 2^62, beyond any number of
    /// messages (so that the next one never overflows; `readNumber`'s bound).
    static let maxSequence: UInt64 = 1 << 62

    /// The sequences of the message files in a spool, ascending (temporary files excluded).
    static func messageSequences(in spool: String) throws -> [UInt64] {
        messageSequences(named: try list(spool))
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

    /// Message files waiting in a spool, and their bytes.
    static func spoolUsage(_ spool: String) throws -> (count: Int, bytes: Int) {
        var count = 0, bytes = 0
        for sequence in try messageSequences(in: spool) {
            var info = stat()
            if stat(spool + "/" + Mailbox.fileName(sequence), &info) == 0 {
                count += 1
                bytes = saturatingSum(bytes, max(0, Int(clamping: info.st_size)))
            }
        }
        return (count, bytes)
    }

    /// Writes `bytes` to `directory/name` atomically: a temporary file,
    /// `fsync`, `rename`, `fsync` of the directory.
    static func writeAtomically(_ bytes: [UInt8], directory: String, name: String) throws {
        let temporary = directory + "/.tmp-\(name)-\(UInt32.random(in: 0...UInt32.max))"
        do {
            try FileWrite.replace(directory + "/" + name, with: bytes, through: temporary)
        } catch {
            throw writeError(error.code, writing: error.file, creating: error.creating)
        }
        try syncDirectory(directory)
    }

    /// A mailbox file that could not be written: `storage-full` when the
    /// device is full, else `mailbox-io`.
    static func writeError(_ code: Int32, writing file: String, creating: Bool = false) -> TransportError {
        if FileWrite.isStorageFull(code) {
            return TransportError(.storageFull, "cannot write \(file): \(FileWrite.describe(code)); the device's storage is full — free space (nothing was posted or accepted)")
        }
        return TransportError(.mailboxIO, "cannot \(creating ? "create" : "write") \(file): \(FileWrite.describe(code))")
    }

    static func syncDirectory(_ directory: String) throws {
        let descriptor = open(directory, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw TransportError(.mailboxIO, "cannot open the directory \(directory): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        if fsync(descriptor) != 0, errno != EINVAL {
            throw TransportError(.mailboxIO, "cannot sync the directory \(directory): \(String(cString: strerror(errno)))")
        }
    }

    static func read(_ path: String, limit: Int) throws -> [UInt8] {
        // Non-blocking: opening a FIFO for reading would wait for a writer.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            // A socket cannot be opened at all (`ENXIO`): no message, and it will never be one.
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
                throw TransportError(.notAMessageFile, "\(path) is not a regular file (a socket or a device), so no message")
            }
            throw TransportError(.mailboxIO, "cannot open \(path): \(String(cString: strerror(code)))")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw TransportError(.mailboxIO, "cannot inspect \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw TransportError(.notAMessageFile, "\(path) is not a regular file (a directory, a FIFO or a device), so no message")
        }
        guard Int(clamping: info.st_size) <= limit else {
            throw TransportError(.oversizedFrame, "the mailbox file \(path) has \(info.st_size) bytes, over the \(limit)-byte limit")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(clamping: info.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { posixRead(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw TransportError(.mailboxIO, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }

    /// A decimal number in a small state file, nil when missing, unreadable or
    /// beyond 2^62 (no spool reaches it: a damaged file, whose next sequence
    /// would overflow).
    static func readNumber(_ path: String) -> UInt64? {
        guard let bytes = try? read(path, limit: 64), let text = String(validating: bytes, as: UTF8.self),
              let number = UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)), number <= 1 << 62 else { return nil }
        return number
    }

    static func writeNumber(_ number: UInt64, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try writeAtomically(Array("\(number)\n".utf8), directory: url.deletingLastPathComponent().path, name: url.lastPathComponent)
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    static func remove(_ path: String) {
        unlink(path)
    }
}

/// The C `read`, out of reach of `MailboxFiles.read(_:limit:)`'s name.
private func posixRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

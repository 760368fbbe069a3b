import CSQLite
import Logging
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// Copies the whole WAL of the store at `path` into its database file and
/// truncates it, from a connection of its own (through `vfs`, or SQLite's
/// default): the next commits start the WAL over.
func checkpointAndTruncateWAL(of path: String, vfs: String? = nil) throws {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, vfs) == SQLITE_OK, let db = handle else {
        sqlite3_close(handle)
        throw SyncError(.database, "cannot open \(path)")
    }
    defer { sqlite3_close(db) }
    sqlite3_busy_timeout(db, 5_000)
    // A connection finds the file in WAL mode when it first reads it.
    guard sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nil, nil, nil) == SQLITE_OK else {
        throw SyncError(.database, "cannot read \(path)")
    }
    var logFrames: Int32 = -1, checkpointed: Int32 = -1
    guard sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_TRUNCATE, &logFrames, &checkpointed) == SQLITE_OK,
          logFrames == checkpointed else {
        throw SyncError(.database, "could not empty the WAL (\(logFrames) frames, \(checkpointed) checkpointed): \(String(cString: sqlite3_errmsg(db)))")
    }
}

/// Runs `sql` on the SQLite file at `path` with a connection of its own (a
/// test changing a store's file behind its back, the store closed).
func rawSQL(_ path: String, _ sql: String) throws {
    var handle: OpaquePointer?
    guard sqlite3_open(path, &handle) == SQLITE_OK, let db = handle else { throw SyncError(.database, "cannot open \(path)") }
    defer { sqlite3_close(db) }
    guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { throw SyncError(.database, String(cString: sqlite3_errmsg(db))) }
}

/// A phone store at `path` (keys of `TestKeys`, opened with `options`)
/// holding steps = 3, closed: the file a test then damages or locks.
func closedStoreWithOneValue(at path: String, options: StoreOptions) async throws {
    let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
    try await store.set(3, for: TestKeys.steps)
    store.close()
}

/// Raises this process's soft limit of open files to its hard limit, once
/// (as the Go runtime does at start): Swift Testing runs the whole suite at
/// once, and its peak, about 1,100 descriptors (stores, sockets, pipes of
/// child processes), is above the 1,024 a Linux shell often starts with (256
/// on macOS). Every test that makes a `TempFolder` makes sure of it first.
let openFileLimitRaised: Void = {
    var limit = rlimit()
    guard getrlimit(openFilesResource, &limit) == 0 else { return }
    let wanted = min(limit.rlim_max, openFilesCeiling)
    guard limit.rlim_cur < wanted else { return }
    limit.rlim_cur = wanted
    _ = setrlimit(openFilesResource, &limit)
}()

#if os(Linux)
private let openFilesResource = Int32(RLIMIT_NOFILE.rawValue)
private let openFilesCeiling = rlim_t.max
#else
private let openFilesResource = RLIMIT_NOFILE
/// Darwin refuses a soft limit above `OPEN_MAX` (10,240) even when the hard
/// limit is unlimited, which it is by default.
private let openFilesCeiling = rlim_t(10_240)
#endif

/// A temporary folder removed when the value is released. An optimized build
/// may release it at its last use, not at the end of its scope: a test whose
/// work goes on in the folder after that keeps it with `withExtendedLifetime`.
final class TempFolder: Sendable {
    let path: String
    init() {
        openFileLimitRaised
        path = NSTemporaryDirectory() + "syncengine-tests-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func file(_ name: String) -> String { path + "/" + name }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

enum TestKeys {
    static let steps = Key<Int>("steps", in: Namespace("health").child("daily"), default: 0, availability: .all, policy: .automaticSmall)
    static let name = Key<String>("name", in: Namespace("profile"), default: "", availability: .all, policy: .manual)
    static let token = Key<String>("token", default: "", availability: .phoneOnly, policy: .automaticSmall)
    static let watchFace = Key<String>("face", default: "", availability: .watchOnly, policy: .automaticSmall)
    static let units = Key<String>("units", default: "metric", availability: .phoneWithWatchSync, policy: .automaticSmall)
    static let draft = Key<String>("draft", default: "", availability: .all, policy: .never)
    static let blob = Key<Data>("blob", default: Data(), availability: .all, policy: .automaticSmall, serializer: .data)
    static let tags = Key<[String]>("tags", default: [], availability: .all, policy: .automaticSmall, resolver: .union())
    static let secret = Key<String>("secret", default: "", availability: .all, policy: .automaticSmall, security: .encrypted)
    static let daily = KeyFamily<Int>("day", in: Namespace("steps"), default: 0, availability: .all, policy: .automaticSmall)

    static let all: [any KeyDeclaration] = [steps, name, token, watchFace, units, draft, blob, tags, secret, daily]
    static func registry() throws -> KeyRegistry { try KeyRegistry(all) }
}

/// A phone store and a watch store in one temp folder, with manual clocks.
struct Pair {
    let folder = TempFolder()
    let phoneClock = ManualClock()
    let watchClock = ManualClock()
    /// The two stores' pairing: every session between them (`withConnectedPeers`) is of it, as an
    /// app's are (a watch whose node id the phone met through another pairing takes a new one).
    let pairing = PairingSecret.generate()
    var phone: SyncStore
    var watch: SyncStore

    /// `configure` changes both stores' options (the same way on each).
    init(keys: [any KeyDeclaration] = TestKeys.all, configure: (inout StoreOptions) -> Void = { _ in }) throws {
        let registry = try KeyRegistry(keys)
        var phoneOptions = StoreOptions(clock: phoneClock, encryption: .keyFile(path: folder.file("phone.key")))
        configure(&phoneOptions)
        var watchOptions = StoreOptions(clock: watchClock, encryption: .keyFile(path: folder.file("watch.key")))
        configure(&watchOptions)
        phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry, options: phoneOptions)
        watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry, options: watchOptions)
    }

    /// Closes the store of `role`, runs `sql` on its file (a damage made by
    /// hand) when given, and opens it again with `TestKeys`, its clock and its key.
    mutating func reopen(_ role: DeviceRole, after sql: String? = nil) throws {
        let name = role == .phone ? "phone" : "watch"
        (role == .phone ? phone : watch).close()
        if let sql { try rawSQL(folder.file("\(name).sqlite"), sql) }
        let store = try SyncStore(path: folder.file("\(name).sqlite"), role: role, registry: try TestKeys.registry(),
                                  options: StoreOptions(clock: role == .phone ? phoneClock : watchClock,
                                                        encryption: .keyFile(path: folder.file("\(name).key"))))
        if role == .phone { phone = store } else { watch = store }
    }
}

/// Drives two endpoints by hand, step by step, recording every frame.
final class Link {
    let a: ReplicationEndpoint
    let b: ReplicationEndpoint
    var frames: [(from: String, frame: Frame)] = []
    var now: Int64 = 1_000

    init(_ a: SyncStore, _ b: SyncStore, epoch: String = "test", protocolRange: ClosedRange<UInt16> = 1...SyncMessage.highestProtocolVersion) {
        var config = ReplicationConfiguration(pairingEpoch: epoch)
        config.protocolRange = protocolRange
        self.a = ReplicationEndpoint(store: a, configuration: config)
        self.b = ReplicationEndpoint(store: b, configuration: config)
    }

    /// A link between two endpoints a test already drove by hand.
    init(endpoints a: ReplicationEndpoint, _ b: ReplicationEndpoint, now: Int64) {
        self.a = a
        self.b = b
        self.now = now
    }

    /// Starts both and exchanges frames until nothing more moves.
    func connect() { run(a.start(now: now), b.start(now: now)) }

    /// Pumps both sides and delivers until quiet.
    func settle() { run(a.pump(now: now), b.pump(now: now)) }

    /// Delivers `fromA` and `fromB` and what they bring back, pumping both
    /// sides whenever nothing is in transit, until quiet; frames from `a` that
    /// `dropsToB` names are lost on the way.
    func run(_ fromA: [Frame], _ fromB: [Frame], droppingToB dropsToB: (Frame) -> Bool = { _ in false }) {
        var queueAB = fromA
        var queueBA = fromB
        var rounds = 0
        while !(queueAB.isEmpty && queueBA.isEmpty) && rounds < 100_000 {
            rounds += 1
            let ab = queueAB, ba = queueBA
            queueAB = []
            queueBA = []
            for f in ab where !dropsToB(f) {
                frames.append(("a", f))
                queueBA += b.receive(f, now: now)
            }
            for f in ba {
                frames.append(("b", f))
                queueAB += a.receive(f, now: now)
            }
            if queueAB.isEmpty && queueBA.isEmpty {
                queueAB = a.pump(now: now)
                queueBA = b.pump(now: now)
            }
        }
    }

    /// All payload bytes that went over the link.
    var allBytes: [UInt8] { frames.flatMap(\.frame.payload) }

    /// The key of every entry that went over the link in a batch or a chunk,
    /// decoded: protocol 2 codes the prefix a key shares with the one before
    /// it once, so a key's bytes need not appear whole in `allBytes`.
    var entryKeys: [String] {
        frames.compactMap { try? SyncMessage(frame: $0.frame) }.flatMap { message -> [String] in
            switch message {
            case .batch(let batch): batch.entries.map(\.key)
            case .chunk(let chunk): [chunk.entry.key]
            default: []
            }
        }
    }
}

/// Every change `store` publishes from now on, in order, as its app sees
/// them (observed synchronously), until this recorder goes.
final class SeenChanges: Sendable {
    private let list = Mutex<[StoreChange]>([])
    private let observation = Mutex<ChangeObservation?>(nil)

    init(_ store: SyncStore) {
        let observing = store.observeChanges(matching: .all) { [weak self] change in self?.list.withLock { $0.append(change) } }
        observation.withLock { $0 = observing }
    }

    deinit { observation.withLock { $0?.cancel() } }

    var all: [StoreChange] { list.withLock { $0 } }
    /// The keys whose values went (`.removed`), in order.
    var removedKeys: [String] { all.filter { $0.kind == .removed }.map(\.key) }
}

extension Array where Element == UInt8 {
    func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, count >= needle.count else { return false }
        for i in 0...(count - needle.count) where self[i] == needle[0] && Array(self[i..<i + needle.count]) == needle { return true }
        return false
    }
}

/// Each message's payload, or nil when it is another kind (for `#require`).
extension SyncMessage {
    var asHello: Hello? { if case .hello(let hello) = self { hello } else { nil } }
    var asBatch: Batch? { if case .batch(let batch) = self { batch } else { nil } }
    var asAck: Ack? { if case .ack(let ack) = self { ack } else { nil } }
    var asChunk: Chunk? { if case .chunk(let chunk) = self { chunk } else { nil } }
    var asChunkAck: ChunkAck? { if case .chunkAck(let ack) = self { ack } else { nil } }
}

/// A log handler that yields each line ("level message", then its metadata
/// as ` key=value` sorted by key when `includesMetadata`) to a stream.
struct StreamLogHandler: LogHandler {
    let sink: AsyncStream<String>.Continuation
    var includesMetadata = false
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var line = "\(event.level) \(event.message)"
        if includesMetadata {
            let all = metadata.merging(event.metadata ?? [:]) { _, new in new }
            for (key, value) in all.sorted(by: { $0.key < $1.key }) { line += " \(key)=\(value)" }
        }
        sink.yield(line)
    }
}


/// Delivers `toWatch` and `toPhone`, then each side's answers, until neither
/// endpoint has anything more to send (all at time 0).
func settle(_ phone: ReplicationEndpoint, _ watch: ReplicationEndpoint, toWatch: [Frame], toPhone: [Frame] = []) {
    var (toWatch, toPhone) = (toWatch, toPhone)
    while !toWatch.isEmpty || !toPhone.isEmpty {
        let (a, b) = (toWatch, toPhone)
        toWatch = b.flatMap { phone.receive($0, now: 0) }
        toPhone = a.flatMap { watch.receive($0, now: 0) }
    }
}

/// Starts both endpoints and runs their handshake to the end.
func establish(_ phone: ReplicationEndpoint, _ watch: ReplicationEndpoint) {
    settle(phone, watch, toWatch: phone.start(now: 0), toPhone: watch.start(now: 0))
}

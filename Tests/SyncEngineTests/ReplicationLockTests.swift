import Foundation
@testable import SyncEngine
import SyncTransport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// One store per file replicates at a time: within a process as across
/// processes, whatever the spelling of the file's path.
@Suite(.timeLimit(.minutes(5))) struct ReplicationLockTests {
    /// Another store on the phone's file (another part of the app opened it too).
    static func secondStore(at path: String, in pair: Pair) throws -> SyncStore {
        try SyncStore(path: path, role: .phone, registry: TestKeys.registry(),
                      options: StoreOptions(encryption: .keyFile(path: pair.folder.file("phone.key"))))
    }

    /// Runs `body` while `pair.phone` replicates with `pair.watch` (its session holds the lock).
    @discardableResult
    static func whilePhoneReplicates<T>(_ pair: Pair, _ body: () async throws -> T) async throws -> T {
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let (a, b) = InMemoryConnection.makePair()
        let sessions = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        let outcome = await Result {
            try await reachability(of: [phone], becomes: true, "the phone's session")
            return try await body()
        }
        await a.close()
        try await withDeadline("the phone's session to end") { for session in sessions { _ = await session.value } }
        return try outcome.get()
    }

    /// A session refused at once: the reason it ended (its peer's end is closed).
    static func refusedSession(of peer: SyncPeer) async throws -> String {
        let (a, b) = InMemoryConnection.makePair()
        await b.close()
        return try await withDeadline("the session to end") { await peer.run(over: a) }
    }

    /// Two stores on one file in one process: while one replicates, the
    /// other's session and queued round get `replication-locked` (as another
    /// process's would); once the first's session ends, the second replicates,
    /// and once it is closed the first does again; nothing stays held.
    @Test func aSecondStoreOnTheSameFileInOneProcessDoesNotReplicateAtTheSameTime() async throws {
        let pair = try Pair()
        let second = try Self.secondStore(at: pair.phone.path, in: pair)
        let secondPeer = SyncPeer(store: second, configuration: ReplicationConfiguration(pairingEpoch: pair.pairing.epoch))
        let folder = TempFolder()
        let mailbox = try Mailbox(directory: folder.path, role: .phone, secret: pair.pairing)
        let events = second.events()
        try await Self.whilePhoneReplicates(pair) {
            #expect { try secondPeer.deliverQueued(through: mailbox) } throws: { ($0 as? SyncError)?.code == .replicationLocked }
            let reason = try await Self.refusedSession(of: secondPeer)
            #expect(reason.hasPrefix("replication-locked"), "\(reason)")
            try await first(of: events, "the second store's replication-locked event") { event in
                if case .error(let error) = event { return error.code == .replicationLocked }
                return false
            }
        }
        try secondPeer.deliverQueued(through: mailbox)
        second.close()
        #expect { try secondPeer.deliverQueued(through: mailbox) } throws: { ($0 as? SyncError)?.code == .closed }
        let firstPeer = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pair.pairing.epoch))
        try firstPeer.deliverQueued(through: mailbox)
        // Nothing in this process holds the lock now, nor its file.
        #expect(!ReplicationLock.isHeld(storePath: pair.phone.path))
        let other = open(ReplicationLock.lockPath(for: pair.phone.path), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(other) }
        #expect(other >= 0 && flock(other, LOCK_EX | LOCK_NB) == 0)
    }

    /// The reconnect loop of a second store on the file does not dial while
    /// the first store's session runs (the peer would see two sessions for one
    /// device); it dials once that session ends.
    @Test func aSecondStoresReconnectLoopDialsOnlyOnceTheFirstStopsReplicating() async throws {
        let pair = try Pair()
        let second = try Self.secondStore(at: pair.phone.path, in: pair)
        let secondPeer = SyncPeer(store: second, configuration: ReplicationConfiguration(pairingEpoch: pair.pairing.epoch))
        let tcp = TCPConfiguration(secret: pair.pairing)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let events = second.events()
        let dialing = try await Self.whilePhoneReplicates(pair) {
            let dialing = Task { await secondPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
            try await first(of: events, "the second store's replication-locked event") { event in
                if case .error(let error) = event { return error.code == .replicationLocked }
                return false
            }
            return dialing
        }
        let connection = try await first(of: listener.connections, "the second store's dial once the first stopped")
        dialing.cancel()
        try await withDeadline("maintainConnection to return when cancelled") { await dialing.value }
        await connection.close()
        await listener.close()
        second.close()
    }

    /// Closing the replicating store ends its session and frees the file: a
    /// store opened on it afterwards replicates.
    @Test func closingTheReplicatingStoreLetsAStoreOpenedAfterItReplicate() async throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let (a, b) = InMemoryConnection.makePair()
        let sessions = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        try await reachability(of: [phone], becomes: true, "the phone's session")
        pair.phone.close()
        try await withDeadline("the closed store's session to end") { _ = await sessions[0].value }
        await b.close()
        _ = await sessions[1].value
        #expect(!ReplicationLock.isHeld(storePath: pair.phone.path))

        let reopened = try Self.secondStore(at: pair.phone.path, in: pair)
        let folder = TempFolder()
        let mailbox = try Mailbox(directory: folder.path, role: .phone, secret: pair.pairing)
        try SyncPeer(store: reopened, configuration: config).deliverQueued(through: mailbox)
        #expect(!ReplicationLock.isHeld(storePath: pair.phone.path))
        reopened.close()
    }

    /// Other spellings of the store's path (a symbolic link to the file, one
    /// to its folder) name the same file: the same lock, in this process and
    /// for another one.
    @Test func anotherSpellingOfTheStoresPathIsTheSameFile() async throws {
        let pair = try Pair()
        let files = FileManager.default
        let linkedFile = pair.folder.file("link.sqlite")
        try files.createSymbolicLink(atPath: linkedFile, withDestinationPath: pair.phone.path)
        let linkedFolder = pair.folder.file("alias")
        try files.createSymbolicLink(atPath: linkedFolder, withDestinationPath: pair.folder.path)
        let folder = TempFolder()
        let mailbox = try Mailbox(directory: folder.path, role: .phone, secret: pair.pairing)
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let throughLink = SyncPeer(store: try Self.secondStore(at: linkedFile, in: pair), configuration: config)
        let throughFolder = SyncPeer(store: try Self.secondStore(at: linkedFolder + "/phone.sqlite", in: pair), configuration: config)

        // "Another process": a lock of its own on the store's lock file (flock locks belong to the open file).
        let other = open(ReplicationLock.lockPath(for: pair.phone.path), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(other) }
        #expect(other >= 0 && flock(other, LOCK_EX | LOCK_NB) == 0)
        for peer in [throughLink, throughFolder] {
            #expect { try peer.deliverQueued(through: mailbox) } throws: { ($0 as? SyncError)?.code == .replicationLocked }
        }
        flock(other, LOCK_UN)

        // This process: the store opened by its own path replicates; the others are refused.
        try await Self.whilePhoneReplicates(pair) {
            for peer in [throughLink, throughFolder] {
                let reason = try await Self.refusedSession(of: peer)
                #expect(reason.hasPrefix("replication-locked"), "\(reason)")
            }
        }
        try throughLink.deliverQueued(through: mailbox)
        try throughFolder.deliverQueued(through: mailbox)
    }

    /// A phone whose store another store replicates refused the session by
    /// closing the connection: its watch heard only "the peer closed the
    /// connection". It now says why (`replication-locked`) before it closes.
    @Test func aLockedPhoneTellsItsWatchWhy() async throws {
        let pair = try Pair()
        let other = try Self.secondStore(at: pair.folder.file("phone.sqlite"), in: pair)
        defer { other.close() }
        try ReplicationLock.acquire(for: other)
        defer { ReplicationLock.release(for: other) }
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let watchEvents = pair.watch.events()
        let (a, b) = InMemoryConnection.makePair()
        let sessions = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        try await first(of: watchEvents, "the watch to hear why the phone refused its session") { event in
            if case .error(let error) = event { return error.code == .replicationLocked }
            return false
        }
        try await withDeadline("both sessions to end") { for session in sessions { _ = await session.value } }
    }
}

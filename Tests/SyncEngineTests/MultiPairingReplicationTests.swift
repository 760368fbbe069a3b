import Foundation
import Logging
@testable import SyncEngine
import SyncTransport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Log messages as an async stream, so tests wait for a line instead of sleeping.
/// Issue 15 on the engine side: a phone with several watches, one pairing
/// each, over one listener; and `maintainConnection` as the one reconnect loop.
@Suite(.timeLimit(.minutes(5))) struct MultiPairingReplicationTests {
    /// A watch store beside `pair`'s, for a second pairing.
    static func secondWatch(in pair: Pair) throws -> SyncStore {
        try SyncStore(path: pair.folder.file("watch-2.sqlite"), role: .watch, registry: TestKeys.registry(),
                      options: StoreOptions(encryption: .keyFile(path: pair.folder.file("watch-2.key"))))
    }

    /// The phone's configured epoch is its first pairing's; a watch of its
    /// second pairing still syncs, because the session takes the epoch of the
    /// pairing its connection authenticated with (`connection.pairingEpoch`).
    @Test func aPhoneServesEachWatchWithItsOwnPairing() async throws {
        let pair = try Pair()
        let secondWatch = try Self.secondWatch(in: pair)
        let pairingA = PairingSecret.generate()
        let pairingB = PairingSecret.generate()
        try await pair.phone.set(5, for: TestKeys.steps)
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pairingA.epoch),
                             tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secrets: [pairingA, pairingB]))
        let server = Task { await phone.serve(listener) }
        let port = listener.port

        // The watch of the phone's primary pairing, then the watch of its second one (a phone serves one at a time).
        for (store, pairing) in [(pair.watch, pairingA), (secondWatch, pairingB)] {
            let watch = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                                 tickInterval: .milliseconds(50))
            let events = pair.phone.events()
            let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: pairing)) }
            let outcome = await Result {
                try await first(of: events, "the phone's session with the watch of pairing \(pairing.epoch)") { event in
                    if case .error(let error) = event, error.code == .pairingMismatch {
                        throw SyncError(.pairingMismatch, "the phone refused the session: \(error)")
                    }
                    if case .connected = event { return true }
                    return false
                }
                try await eventually(store, "the phone's steps on the watch of pairing \(pairing.epoch)") {
                    try store.storedValue(for: TestKeys.steps) == 5
                }
            }
            client.cancel()
            try await withDeadline("the watch of pairing \(pairing.epoch) to stop") { _ = await client.value }
            try outcome.get()
        }
        await listener.close()
        server.cancel()
        try await withDeadline("the phone to stop") { _ = await server.value }
        secondWatch.close()
    }

    /// A phone live with the watch of one pairing still posts for the watch of
    /// another pairing that it never met, through that watch's mailbox; the
    /// mailbox of the live watch's pairing gets nothing (the session sends).
    /// (It posted nothing for the never-met watch while any watch was live.)
    @Test func aPhoneLiveWithOneWatchPostsForAWatchOfAnotherPairingItNeverMet() async throws {
        let pair = try Pair()
        let secondWatch = try Self.secondWatch(in: pair)
        let pairingA = PairingSecret.generate()
        let pairingB = PairingSecret.generate()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: pairingA.epoch),
                             tickInterval: .milliseconds(50))
        let watchA = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: pairingA.epoch),
                              tickInterval: .milliseconds(50))
        let watchB = SyncPeer(store: secondWatch, configuration: ReplicationConfiguration(pairingEpoch: pairingB.epoch))
        let folderA = TempFolder()
        let folderB = TempFolder()
        let phoneBoxA = try Mailbox(directory: folderA.path, role: .phone, secret: pairingA)
        let phoneBoxB = try Mailbox(directory: folderB.path, role: .phone, secret: pairingB)
        let watchBoxB = try Mailbox(directory: folderB.path, role: .watch, secret: pairingB)
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secrets: [pairingA, pairingB]))
        let server = Task { await phone.serve(listener) }
        let port = listener.port
        let client = Task { await watchA.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: pairingA)) }
        let outcome = await Result {
            try await reachability(of: [phone, watchA], becomes: true, "the watch of pairing A to be live")
            try await pair.phone.set(5, for: TestKeys.steps)
            try await eventually(pair.watch, "steps 5 on the live watch") { try pair.watch.storedValue(for: TestKeys.steps) == 5 }

            #expect(!phone.isLive(through: phoneBoxB))
            #expect(try phone.deliverQueued(through: phoneBoxB).messagesPosted > 0)
            #expect(try watchB.deliverQueued(through: watchBoxB).entriesApplied > 0)
            #expect(try secondWatch.storedValue(for: TestKeys.steps) == 5)

            #expect(phone.isLive(through: phoneBoxA))
            #expect(try phone.deliverQueued(through: phoneBoxA).messagesPosted == 0)
        }
        client.cancel()
        server.cancel()
        await listener.close()
        try await withDeadline("the watch and the phone to stop") {
            _ = await client.value
            _ = await server.value
        }
        secondWatch.close()
        try outcome.get()
    }

    /// `maintainConnection` dials through `ReconnectingDialer`: its retries
    /// are logged to the TCP configuration's logger (with the reason and the
    /// next delay), and each failed dial is still a `not-connected` event.
    @Test func maintainConnectionRetriesThroughTheReconnectingDialer() async throws {
        let pair = try Pair()
        // A port that refuses: bound, then closed.
        let closed = try await TCPListener(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: .generate()))
        let port = closed.port
        await closed.close()
        let (lines, sink) = AsyncStream.makeStream(of: String.self)
        var configuration = TCPConfiguration(secret: .generate())
        configuration.logger = Logger(label: "test") { _ in StreamLogHandler(sink: sink) }
        let events = pair.watch.events()
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: "e"))
        let client = Task {
            await watch.maintainConnection(host: "127.0.0.1", port: port, configuration: configuration,
                                           policy: ReconnectPolicy(initialDelay: .milliseconds(10), maxDelay: .milliseconds(50)))
        }
        try await first(of: events, "a not-connected event") { event in
            if case .error(let error) = event { return error.code == .notConnected }
            return false
        }
        try await first(of: lines, "the dialer's retry in the log") { $0.contains("dial attempt failed") }
        client.cancel()
        try await withDeadline("maintainConnection to return when cancelled") { await client.value }
    }

    /// The replication lock is kept: while another process holds it the
    /// watch does not dial (and says so once); it dials once the lock is
    /// free, and releases it when it stops.
    @Test func maintainConnectionDialsOnlyWhileItHoldsTheReplicationLock() async throws {
        let pair = try Pair()
        let secret = PairingSecret.generate()
        let configuration = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        // "Another process": a lock of its own on the store's lock file (flock locks belong to the open file).
        let lockPath = ReplicationLock.lockPath(for: pair.watch.path)
        let other = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(other >= 0)
        #expect(flock(other, LOCK_EX | LOCK_NB) == 0)
        let events = pair.watch.events()
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        try await first(of: events, "the replication-locked event") { event in
            if case .error(let error) = event { return error.code == .replicationLocked }
            return false
        }
        flock(other, LOCK_UN)
        let connection = try await first(of: listener.connections, "the watch's dial once the lock is free")
        #expect(flock(other, LOCK_EX | LOCK_NB) != 0, "the watch holds the lock during its session")
        client.cancel()
        try await withDeadline("maintainConnection to return when cancelled") { await client.value }
        await connection.close()
        #expect(flock(other, LOCK_EX | LOCK_NB) == 0, "the watch released the lock when it stopped")
        close(other)
        await listener.close()
    }

    /// A lock file that cannot be opened (here a directory in its place; in
    /// the field too many open files) is said as such, not as another process
    /// replicating: a session, a queued round and the dialing loop each name
    /// it, and the loop dials once it can be opened.
    @Test func aLockFileThatCannotBeOpenedIsNotCalledLocked() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let lockPath = ReplicationLock.lockPath(for: pair.watch.path)
        try FileManager.default.createDirectory(atPath: lockPath, withIntermediateDirectories: false)
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))

        let (a, _) = InMemoryConnection.makePair()
        let reason = try await withDeadline("a session without its lock to end") { await watch.run(over: a) }
        #expect(reason.hasPrefix("replication-lock-unavailable") && reason.contains(lockPath), "\(reason)")
        let mailbox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        #expect { try watch.deliverQueued(through: mailbox) } throws: { ($0 as? SyncError)?.code == .replicationLockUnavailable }

        let configuration = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let events = pair.watch.events()
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        try await first(of: events, "the dialing loop's replication-lock-unavailable event") { event in
            if case .error(let error) = event { return error.code == .replicationLockUnavailable }
            return false
        }
        try FileManager.default.removeItem(atPath: lockPath)
        let connection = try await first(of: listener.connections, "the watch's dial once the lock file can be opened")
        client.cancel()
        try await withDeadline("maintainConnection to return when cancelled") { await client.value }
        await connection.close()
        await listener.close()
    }
}

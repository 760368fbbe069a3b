import Foundation
import SyncTransport

/// Live when reachable, queued when not (as an app does with WatchConnectivity's
/// `sendMessage` and `transferUserInfo`): while a session with the peer is
/// established the changes go over it; otherwise they are posted to a
/// `Mailbox` and delivered when the peer next reads it.
///
/// ```swift
/// let mailbox = try Mailbox(directory: sharedFolder, role: .watch, secret: secret)
/// async let queued: Void = peer.runQueued(through: mailbox)        // until cancelled
/// async let live: Void = peer.maintainConnection(host: host, port: port, configuration: tcp)
/// for await reachable in peer.reachabilityChanges() { print(reachable ? "live" : "queued") }
/// ```
extension SyncPeer {
    /// Whether a live session with a peer is established right now: changes
    /// go over it, not through the mailbox.
    public var isReachable: Bool { isConnected }

    /// `isReachable` each time it changes, from now on (the current value is
    /// not repeated first: read `isReachable`).
    public func reachabilityChanges() -> AsyncStream<Bool> {
        reachabilityHub.subscribe(bufferingNewest: 100)
    }

    /// One round of queued delivery through `mailbox`: reads and applies what
    /// the peer queued, acknowledges it, reads the peer's acknowledgements
    /// (which move its cursor, so `pendingSummary` shrinks), then posts this
    /// store's pending changes for the peer, unless a live session with it is
    /// up. Failures (a full spool, refused files) are `.error` events and in
    /// the report, never thrown; throws `replication-locked` when another
    /// process, or another store of this one, replicates the file
    /// (`replication-lock-unavailable` when its lock file cannot be opened),
    /// and `closed` when the store is closed (nothing is read or posted).
    /// Throws `invalid-configuration` when called from inside a round of this
    /// peer (a change observer or will-commit hook the round runs): the round
    /// acknowledges what it applied itself. Another thread waits for the round.
    /// Mailboxes of one directory, role and pairing are one: an app may make
    /// one for each round (the first made does the rounds of all).
    @discardableResult
    public func deliverQueued(through mailbox: Mailbox) throws -> QueuedDeliveryReport {
        try store.checkOpen()
        // The round holds `queuedDrivers`, which is not re-entrant: a nested round would trap on it.
        guard queuedRoundThread.load(ordering: .relaxed) != Database.currentThread else {
            throw SyncError(.invalidConfiguration, "deliverQueued(through:) was called from inside a queued round of this peer (a change observer or will-commit hook it ran); that round acknowledges what it applied: run another round after it returns")
        }
        try ReplicationLock.acquire(for: store)
        defer { ReplicationLock.release(for: store) }
        // Writes made while the clock ran far ahead, written again before this round posts (the clock was set right).
        if store.clock.followWallClock() { store.reissueWritesFromAClockAheadLogged() }
        var configuration = self.configuration
        configuration.pairingEpoch = mailbox.pairingEpoch
        let key = QueuedDriverKey(mailbox)
        let store = self.store
        let (report, peerNode) = queuedDrivers.withLock { drivers in
            queuedRoundThread.store(Database.currentThread, ordering: .relaxed)
            defer { queuedRoundThread.store(0, ordering: .relaxed) }
            let driver = drivers[key] ?? MailboxReplicator(port: SQLiteReplicationPort(store), reporter: StoreReporter(store),
                                                           configuration: configuration, mailbox: mailbox)
            drivers[key] = driver
            // A watch is met through one mailbox: the node ids the others' watches named are taken (`refusesTakenNodeID`).
            driver.nodesOfOtherMailboxes = Set(drivers.filter { $0.key != key }.compactMap(\.value.learnedPeerNode))
            let report = driver.exchange { peerNode in !isConnected(to: peerNode, ofPairing: mailbox.pairingEpoch) }
            queuedPeerNodes.withLock { $0[key] = driver.peerNode }
            return (report, driver.peerNode)
        }
        if report.messagesRead > 0 || report.messagesPosted > 0 || report.acknowledged {
            // The round concerns the mailbox's peer, as its other events do: named once known (a phone with several
            // watches has one mailbox each), nil only before any message of that peer was read.
            store.emit(.queuedDelivery(read: report.messagesRead, applied: report.entriesApplied, posted: report.messagesPosted,
                                       acknowledged: report.acknowledged), peer: peerNode)
        }
        return report
    }

    /// `deliverQueued(through:)` on the peer's own serial queue, the caller
    /// suspended meanwhile: a round writes and syncs mailbox files and the
    /// store (an `fsync` each, seconds on a busy disk), which would otherwise
    /// hold one of the few threads of Swift concurrency's cooperative pool (one
    /// a core) that every other task needs. Same report and errors.
    @discardableResult
    func deliverQueuedOffPool(through mailbox: Mailbox) async throws -> QueuedDeliveryReport {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<QueuedDeliveryReport, any Error>) in
            queuedRounds.async {
                continuation.resume(with: Result { try self.deliverQueued(through: mailbox) })
            }
        }
    }

    /// Whether a round through `mailbox` would post nothing now: a live session
    /// with its peer is up (with a peer of its pairing, while its peer is not known yet).
    /// Never waits for a round of another mailbox of this peer (which holds
    /// `queuedDrivers` while it writes and syncs): it runs on the cooperative pool.
    func isLive(through mailbox: Mailbox) -> Bool {
        liveCheckHook.withLock { $0 }?()
        let peerNode = queuedPeerNodes.withLock { $0[QueuedDriverKey(mailbox)] }
        return isConnected(to: peerNode, ofPairing: mailbox.pairingEpoch)
    }

    /// Runs queued delivery through `mailbox` until the task is cancelled or
    /// the store closes: a round (`deliverQueued(through:)`) at once, after
    /// every local write or `sync()` unless a live session with the mailbox's
    /// peer is up (it sends them), when the live session ends (what it had
    /// not sent is queued), and on a timer, to read what the peer posted: every
    /// `pollInterval` after a round that moved something; each round that moved
    /// nothing (or found another process replicating the store) doubles the
    /// wait, up to `quietPollInterval` (a device at rest is not woken several
    /// times a second); after a round that failed for a full device, the
    /// configuration's `storageFullRetryInterval` (a local write still starts
    /// one at once). Once cancelled, a last round posts what was committed
    /// until then. The rounds run on a serial queue of the peer's own, not on
    /// Swift concurrency's cooperative pool: their `fsync`s, seconds each on a
    /// busy disk, never hold up the app's other tasks.
    public func runQueued(through mailbox: Mailbox, pollInterval: Duration = .milliseconds(250),
                          quietPollInterval: Duration = .seconds(2)) async {
        let writes = store.localWrites.subscribe(bufferingNewest: 1)
        let reachability = reachabilityChanges()
        let (wakeups, wake) = AsyncStream.makeStream(of: QueuedWakeup.self, bufferingPolicy: .bufferingNewest(1))
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in writes { wake.yield(.localWrite) }
                wake.finish()  // the store closed (or the rounds ended)
            }
            group.addTask {
                for await _ in reachability { wake.yield(.reachability) }
            }
            var schedule = TickSchedule(base: pollInterval, quiet: quietPollInterval)
            var timer: Task<Void, Never>?
            var timerDeadline = ContinuousClock.now
            func poll(after wait: Duration) {
                store.timedWaits.publish(.queuedRound(wait))
                timer?.cancel()
                timerDeadline = .now + wait
                timer = Task {
                    try? await Task.sleep(for: wait.cappedForSleep)
                    if !Task.isCancelled { wake.yield(.timer) }
                }
            }
            var reportedLock = false
            /// One round; whether it moved anything (not when another process replicates the
            /// store), and whether it stopped because a device's storage is full.
            func round() async -> (moved: Bool, storageFull: Bool) {
                do {
                    let report = try await deliverQueuedOffPool(through: mailbox)
                    reportedLock = false
                    if report.failure?.code == .storageFull { return (false, true) }
                    return (report.messagesRead > 0 || report.messagesPosted > 0 || report.acknowledged, false)
                } catch {
                    if !reportedLock { store.emit(.error(error as? SyncError ?? SyncError(.mailboxIO, "\(error)"))) }
                    reportedLock = true
                    return (false, false)
                }
            }
            let storageFullRetryInterval = configuration.storageFullRetryInterval
            poll(after: await round().storageFull ? storageFullRetryInterval : pollInterval)
            for await wakeup in wakeups {
                if Task.isCancelled { break }
                var timed = wakeup == .timer
                if wakeup == .localWrite, isLive(through: mailbox) {
                    // The live session sends the write, and a round would post nothing: the
                    // timer's round reads what the peer posted. (That round is due now if its
                    // wake-up was replaced by this one.)
                    guard ContinuousClock.now >= timerDeadline else { continue }
                    timed = true
                }
                let (moved, storageFull) = await round()
                // A full device: the next timed round after a pause, not at the quick pace
                // (each would read and decrypt what waits, and fail to store it again).
                poll(after: storageFull ? storageFullRetryInterval : schedule.next(after: timed ? .tick(sent: moved) : .other, quiet: true))
            }
            timer?.cancel()
            group.cancelAll()
        }
        // Writes made just before the end (an app going to the background) are not left behind.
        if !store.isClosed {
            do {
                try await deliverQueuedOffPool(through: mailbox)
            } catch {
                store.emit(.error(error as? SyncError ?? SyncError(.mailboxIO, "\(error)")))
            }
        }
    }
}

/// What wakes `runQueued` for a round.
enum QueuedWakeup: Sendable {
    case timer, localWrite, reachability
}

/// Which queued-delivery driver a mailbox's rounds go to: its directory, role
/// and pairing, not the object (an app may make a `Mailbox` for each round).
struct QueuedDriverKey: Hashable, Sendable {
    let directory: String
    let role: MailboxRole
    let pairingEpoch: String

    init(_ mailbox: Mailbox) {
        // Links resolved: one directory reached through a symbolic link and not (`/var` and
        // `/private/var`) is one mailbox, whose watch is one, never taken for two sharing a node id.
        directory = URL(fileURLWithPath: mailbox.directory).resolvingSymlinksInPath().standardizedFileURL.path
        role = mailbox.role
        pairingEpoch = mailbox.pairingEpoch
    }
}

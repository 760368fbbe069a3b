import Dispatch
import Foundation
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Synchronization
import Testing

/// Where a live session's applies wait for the disk (`durability: .full`: an
/// `fsync` per commit; a `FileValueStore`: one per value file), its loop runs
/// off Swift concurrency's cooperative pool.
@Suite(.timeLimit(.minutes(5))) struct SessionLoopOffPoolTests {
    /// More sessions than the pool has threads, each held inside the commit of
    /// what it received (its store's did-commit hook, as an `fsync` of seconds
    /// on a loaded disk holds it): another task still runs, and once let go
    /// every change arrives. Before, each session applied on a thread of the
    /// pool, and the pool ran nothing else until the commits were let go.
    enum WatchStore: CaseIterable { case fullDurability, valueFiles }

    @Test(arguments: WatchStore.allCases)
    func sessionsHeldInTheirApplyLeaveTheCooperativePoolFree(_ kind: WatchStore) async throws {
        let sessions = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: sessions)
        hold.releaseAtTheLatest(after: 120)
        var pairs: [Pair] = []
        var fileStores: [FileValueStore] = []
        for _ in 0..<sessions {
            var pair = try Pair { if kind == .fullDurability { $0.durability = .full } }
            if kind == .valueFiles {
                pair.watch.close()
                let files = try FileValueStore(directory: pair.folder.file("watch-files"), role: .watch,
                                               registry: pair.watch.registry,
                                               options: StoreOptions(clock: pair.watchClock, encryption: .keyFile(path: pair.folder.file("files.key"))))
                fileStores.append(files)
                pair.watch = files.syncStore
            }
            try pair.phone.setNow(1, for: TestKeys.steps)
            pair.watch.addDidCommitHook { changes in
                if changes.contains(where: { $0.origin == .remote }) { hold.hold() }
            }
            pairs.append(pair)
        }
        let (running, closers, _) = SessionLoopOffPoolTests.runPeers(of: pairs)

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(sessions) sessions held in the commit of what they received kept every other task from running: they block the cooperative pool")

        for pair in pairs {
            try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
        }
        for connection in closers { await connection.close() }
        try await withDeadline("the sessions to end") { for task in running { _ = await task.value } }
    }

    /// Under `.normal` a session loop runs on the pool, but a frame that finds
    /// the writer held by another thread (here an app's write, held in its
    /// will-commit hook as a large batch or a slow disk holds it) is applied
    /// on a queue of the session's own. More such sessions than the pool has
    /// threads: another task still runs, and once the app's writes are let go
    /// every change arrives. Before, each session waited for the write lock on
    /// a thread of the pool, and the pool ran nothing else meanwhile.
    @Test func sessionsWaitingForAWriterAnAppHoldsLeaveTheCooperativePoolFree() async throws {
        let sessions = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: sessions)
        var pairs: [Pair] = []
        for _ in 0..<sessions {
            let pair = try Pair()
            try pair.phone.setNow(1, for: TestKeys.steps)
            pair.watch.addWillCommitHook { changes in
                if changes.contains(where: { $0.key == TestKeys.draft.name && $0.origin == .local }) { hold.hold() }
            }
            pairs.append(pair)
        }
        // The watches never tick: a tick that waits for the writer would hold back the frame the test waits for.
        let (running, closers, peers) = SessionLoopOffPoolTests.runPeers(of: pairs, watchTicks: .seconds(3600))
        for (pair, peer) in zip(pairs, peers) {
            try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
            try await peer.phone.waitUntilIdle(timeout: waitLimit)
            try await peer.watch.waitUntilIdle(timeout: waitLimit)
        }
        // At rest, no frame moves (ticks are not turns): every turn from here on is a frame that came after.
        let turns = peers.map(\.watch.sessionLoopTurns)
        // Each watch's app writes on a thread of its own and is held inside its transaction.
        for pair in pairs {
            Thread { _ = try? pair.watch.setNow("held", for: TestKeys.draft) }.start()
        }
        await hold.allHeld()
        // Sooner than the wait below gives up: a blocked pool then fails on the outcome.
        hold.releaseAtTheLatest(after: 120)
        // Then each phone writes, and each watch's loop takes a frame that needs the writer.
        for pair in pairs { try pair.phone.setNow(2, for: TestKeys.steps) }
        for (peer, before) in zip(peers, turns) {
            let watch = peer.watch
            try await withDeadline("each watch's loop to take the phone's batch", within: .seconds(180)) {
                await watch.sessionLoopTurns(exceeding: before)
            }
        }

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(sessions) sessions waiting for a writer their app held kept every other task from running: they block the cooperative pool")

        for pair in pairs {
            try await eventually(pair.watch, "steps 2 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 2 }
            #expect(try pair.watch.storedValue(for: TestKeys.draft) == "held")
        }
        for connection in closers { await connection.close() }
        try await withDeadline("the sessions to end") { for task in running { _ = await task.value } }
    }

    /// Runs a phone and a watch peer for each pair, over an in-memory link:
    /// their tasks, the connections that end them when closed, and the peers.
    static func runPeers(of pairs: [Pair], watchTicks: Duration = .milliseconds(50))
        -> (running: [Task<String, Never>], closers: [InMemoryConnection], peers: [(phone: SyncPeer, watch: SyncPeer)]) {
        var running: [Task<String, Never>] = []
        var closers: [InMemoryConnection] = []
        var peers: [(phone: SyncPeer, watch: SyncPeer)] = []
        for pair in pairs {
            let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
            let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
            let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: watchTicks, quietTickInterval: max(watchTicks, .seconds(5)))
            let (a, b) = InMemoryConnection.makePair()
            running += [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
            closers.append(a)
            peers.append((phone, watch))
        }
        return (running, closers, peers)
    }
}

/// A live session's handshake (what a session does once established: records
/// its peer, syncs the WAL for its receipt, takes back the queued batches a
/// re-baseline supersedes, with an `fsync` of the spool each) runs off the
/// cooperative pool.
@Suite(.timeLimit(.minutes(5))) struct HandshakeOffPoolTests {
    /// More phones than the pool has threads, each re-baselining a returning
    /// watch live while a queued round of the same store is held in its
    /// mailbox write (as an `fsync` of seconds on a loaded disk holds it):
    /// taking the superseded batches back waits for that round, and another
    /// task still runs meanwhile. Once let go, each notice goes, after its
    /// batches were taken back. Before, each handshake waited on a thread of
    /// the pool, and the pool ran nothing else.
    @Test func liveRebaselinesWaitingForAQueuedRoundLeaveTheCooperativePoolFree() async throws {
        let phones = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: phones)
        var units: [(queued: QueuedPair, other: Mailbox, folder: TempFolder)] = []
        for _ in 0..<phones {
            let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
            // A mailbox of another watch of the same phone: its round posts the phone's values, held in the write.
            let folder = TempFolder()
            let other = try Mailbox(directory: folder.path, role: .phone, secret: PairingSecret.generate())
            other.beforeWritingHook.withLock { $0 = { _ in hold.hold() } }
            units.append((queued, other, folder))
        }
        for unit in units {
            let (phone, other) = (unit.queued.phone, unit.other)
            Thread.detachNewThread { _ = try? phone.deliverQueued(through: other) }
        }
        await hold.allHeld()
        // Sooner than the wait below gives up: a blocked pool then fails on the outcome.
        hold.releaseAtTheLatest(after: 120)

        var running: [Task<String, Never>] = []
        var closers: [InMemoryConnection] = []
        for unit in units {
            let (a, b) = InMemoryConnection.makePair()
            let (phone, watch) = (unit.queued.phone, unit.queued.watch)
            running += [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
            closers.append(a)
        }
        // Each phone's loop took the watch's hello, whose handshake takes the batches back.
        for unit in units {
            let phone = unit.queued.phone
            try await withDeadline("each phone's loop to take the watch's hello", within: .seconds(180)) {
                await phone.sessionLoopTurns(exceeding: 0)
            }
        }

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(phones) live re-baselines waiting for a queued round kept every other task from running: their handshakes block the cooperative pool")

        for unit in units {
            let watch = unit.queued.home.watches[0]
            try await eventually(watch, "the re-baseline on the watch") {
                try watch.storedValue(for: TestKeys.steps) == nil && watch.storedValue(for: TestKeys.daily["p1"]) == 101
            }
            #expect(try unit.queued.phoneBox.outgoingMessages().allSatisfy {
                if case .batch(_, _, _, let entries) = try QueuedMessage(frame: $0.frame) { !entries.contains { $0.key == TestKeys.steps.name } } else { true }
            }, "a superseded batch is still queued")
        }
        for connection in closers { await connection.close() }
        let sessions = running
        try await withDeadline("the sessions to end") { for task in sessions { _ = await task.value } }
    }
}

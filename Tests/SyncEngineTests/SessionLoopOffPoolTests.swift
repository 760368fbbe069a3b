import Dispatch
import Foundation
@_spi(Testing) @testable import SyncEngine
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
            try await withDeadline("each watch's loop to take the phone's batch", within: .seconds(180)) {
                while peer.watch.sessionLoopTurns == before { await Task.yield() }
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

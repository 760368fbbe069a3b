import Dispatch
import Foundation
@testable import SyncEngine
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
        let (running, closers) = SessionLoopOffPoolTests.runPeers(of: pairs)

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(sessions) sessions held in the commit of what they received kept every other task from running: they block the cooperative pool")

        for pair in pairs {
            try await eventually(pair.watch, "steps 1 on the watch") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
        }
        for connection in closers { await connection.close() }
        try await withDeadline("the sessions to end") { for task in running { _ = await task.value } }
    }

    /// Runs a phone and a watch peer for each pair, over an in-memory link:
    /// their tasks, and the connections that end them when closed.
    static func runPeers(of pairs: [Pair]) -> (running: [Task<String, Never>], closers: [InMemoryConnection]) {
        var running: [Task<String, Never>] = []
        var closers: [InMemoryConnection] = []
        for pair in pairs {
            let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
            let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
            let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
            let (a, b) = InMemoryConnection.makePair()
            running += [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
            closers.append(a)
        }
        return (running, closers)
    }
}

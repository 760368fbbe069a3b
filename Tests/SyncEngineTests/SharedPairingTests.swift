import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// A phone whose two watches were given the same pairing (one secret copied to
/// both, or a watch restored from another's backup): queued delivery must come
/// to rest, with every value on every device, never re-posting forever.
@Suite(.timeLimit(.minutes(5))) struct SharedPairingTests {
    /// The phone (0) and two watches (1, 2), one mailbox directory per watch, one shared secret.
    final class Hub {
        let folder = TempFolder()
        let secret: PairingSecret
        let stores: [SyncStore]
        let peers: [SyncPeer]
        let phoneBoxes: [Mailbox]
        let watchBoxes: [Mailbox]

        init(sameNodeID: Bool = false) throws {
            let registry = try TestKeys.registry()
            let folder = self.folder
            let secret = PairingSecret.generate()
            self.secret = secret
            if sameNodeID {
                // Watch 2 is a copy of watch 1's store (restored from its backup).
                let first = try SyncStore(path: folder.file("1.sqlite"), role: .watch, registry: registry,
                                          options: StoreOptions(encryption: .keyFile(path: folder.file("1.key"))))
                first.close()
                for suffix in ["sqlite", "sqlite-wal", "key"] where FileManager.default.fileExists(atPath: folder.file("1.\(suffix)")) {
                    try FileManager.default.copyItem(atPath: folder.file("1.\(suffix)"), toPath: folder.file("2.\(suffix)"))
                }
            }
            stores = try (0...2).map { i in
                try SyncStore(path: folder.file("\(i).sqlite"), role: i == 0 ? .phone : .watch, registry: registry,
                              options: StoreOptions(encryption: .keyFile(path: folder.file("\(i).key"))))
            }
            let epoch = secret.epoch
            peers = stores.map { SyncPeer(store: $0, configuration: ReplicationConfiguration(pairingEpoch: epoch)) }
            phoneBoxes = try (1...2).map { try Mailbox(directory: folder.file("box\($0)"), role: .phone, secret: secret) }
            watchBoxes = try (1...2).map { try Mailbox(directory: folder.file("box\($0)"), role: .watch, secret: secret) }
        }

        /// Rounds (the phone through both mailboxes, then each watch) until one moves nothing; the rounds run.
        func runUntilQuiet(maxRounds: Int = 30) throws -> (quiet: Bool, reports: [QueuedDeliveryReport]) {
            var all: [QueuedDeliveryReport] = []
            for _ in 0..<maxRounds {
                let reports = try [peers[0].deliverQueued(through: phoneBoxes[0]), peers[0].deliverQueued(through: phoneBoxes[1]),
                                   peers[1].deliverQueued(through: watchBoxes[0]), peers[2].deliverQueued(through: watchBoxes[1])]
                all += reports
                if reports.allSatisfy({ $0.messagesRead == 0 && $0.messagesPosted == 0 }) { return (true, all) }
            }
            return (false, all)
        }
    }

    /// Two watches with node ids of their own, one pairing: each mailbox serves its
    /// own watch from that watch's cursor, so rounds come to rest and all converge.
    @Test func twoWatchesOfOnePairingThroughMailboxesComeToRest() async throws {
        let hub = try Hub()
        #expect(hub.stores[1].nodeID != hub.stores[2].nodeID)
        try await hub.stores[0].set(1, for: TestKeys.steps)
        try await hub.stores[1].set("a", for: TestKeys.watchFace)
        try await hub.stores[2].set(["b"], for: TestKeys.tags)
        let (quiet, reports) = try hub.runUntilQuiet()
        #expect(quiet, "queued delivery came to rest: \(reports.suffix(4))")
        for store in hub.stores {
            #expect(try store.storedValue(for: TestKeys.steps) == 1)
            #expect(try store.storedValue(for: TestKeys.tags) == ["b"])
        }
        // Later writes still flow, and rest again.
        try await hub.stores[1].set(7, for: TestKeys.steps)
        #expect(try hub.runUntilQuiet().quiet)
        for store in hub.stores { #expect(try store.storedValue(for: TestKeys.steps) == 7) }
    }

    /// A watch restored from the other's backup: the same pairing and the same node id,
    /// each with its own mailbox. The phone refuses the node id through the second
    /// mailbox, naming the problem; that watch takes a new node id and both converge.
    @Test func twoWatchesWithOneNodeIDThroughMailboxesAreToldAndConverge() async throws {
        let hub = try Hub(sameNodeID: true)
        let shared = hub.stores[1].nodeID
        #expect(hub.stores[2].nodeID == shared)
        try await hub.stores[0].set("imperial", for: TestKeys.units)
        try await hub.stores[1].set(3, for: TestKeys.steps)
        try await hub.stores[2].set(["b"], for: TestKeys.tags)
        let (quiet, reports) = try hub.runUntilQuiet()
        #expect(quiet, "queued delivery came to rest: \(reports.suffix(4))")
        #expect(hub.stores[1].nodeID != hub.stores[2].nodeID, "one of the two took a new node id")
        let told = reports.flatMap(\.refused).filter { $0.code == .nodeIDConflict }
        #expect(told.contains { $0.message.contains("another mailbox") && $0.message.contains(String(shared, radix: 16)) }, "\(told)")
        for (i, store) in hub.stores.enumerated() {
            #expect(try store.storedValue(for: TestKeys.units) == "imperial", "device \(i)")
            #expect(try store.storedValue(for: TestKeys.steps) == 3, "device \(i)")
            #expect(try store.storedValue(for: TestKeys.tags) == ["b"], "device \(i)")
        }
        try await hub.stores[2].set(9, for: TestKeys.steps)
        #expect(try hub.runUntilQuiet().quiet)
        for store in hub.stores { #expect(try store.storedValue(for: TestKeys.steps) == 9) }
    }

    /// Live: two watches with node ids of their own dial the phone's listener with
    /// one pairing secret; each is served from its own cursor, and all converge.
    @Test func twoWatchesOfOnePairingOverTCPConverge() async throws {
        let hub = try Hub()
        let peers = hub.stores.map { SyncPeer(store: $0, configuration: ReplicationConfiguration(pairingEpoch: hub.secret.epoch),
                                               tickInterval: .milliseconds(50)) }
        let configuration = TCPConfiguration(secret: hub.secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let server = Task { await peers[0].serve(listener) }
        let port = listener.port
        let clients = peers.dropFirst().map { peer in
            Task { await peer.maintainConnection(host: "127.0.0.1", port: port, configuration: configuration) }
        }
        let run = await Result {
            try await hub.stores[0].set(1, for: TestKeys.steps)
            try await hub.stores[2].set(["b"], for: TestKeys.tags)
            for store in hub.stores {
                try await eventually(store, "steps and tags everywhere") {
                    try store.storedValue(for: TestKeys.steps) == 1 && store.storedValue(for: TestKeys.tags) == ["b"]
                }
            }
            try await hub.stores[1].set(5, for: TestKeys.steps)
            for store in hub.stores {
                try await eventually(store, "watch 1's later write everywhere") { try store.storedValue(for: TestKeys.steps) == 5 }
            }
            for peer in peers { try await peer.waitUntilIdle(timeout: waitLimit) }
            for watch in hub.stores.dropFirst() {
                #expect(try hub.stores[0].pendingSummary(for: watch.nodeID).total == 0)
            }
        }
        for client in clients { client.cancel() }
        server.cancel()
        await listener.close()
        try await withDeadline("the watches and the phone to stop") {
            for client in clients { _ = await client.value }
            _ = await server.value
        }
        try run.get()
    }
}

extension SharedPairingTests {
    /// Live: two watches with one node id and one pairing replace each other's
    /// session again and again; the phone says so once, naming the node id and the fix.
    @Test func twoLiveWatchesWithOneNodeIDAreReported() async throws {
        let hub = try Hub(sameNodeID: true)
        let shared = hub.stores[1].nodeID
        let peers = hub.stores.map { SyncPeer(store: $0, configuration: ReplicationConfiguration(pairingEpoch: hub.secret.epoch),
                                               tickInterval: .milliseconds(50)) }
        let configuration = TCPConfiguration(secret: hub.secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        let events = hub.stores[0].events()
        let server = Task { await peers[0].serve(listener) }
        let port = listener.port
        let clients = peers.dropFirst().map { peer in
            Task { await peer.maintainConnection(host: "127.0.0.1", port: port, configuration: configuration) }
        }
        let run = await Result {
            let event = try await first(of: events, "the phone's node-id-conflict for two live watches of one node id") { event in
                if case .error(let error) = event { return error.code == .nodeIDConflict }
                return false
            }
            guard case .error(let error) = event else { return }
            #expect(error.message.contains(String(shared, radix: 16)) && error.message.contains("renewNodeID"), "\(error)")
        }
        for client in clients { client.cancel() }
        server.cancel()
        await listener.close()
        try await withDeadline("the watches and the phone to stop") {
            for client in clients { _ = await client.value }
            _ = await server.value
        }
        try run.get()
    }
}

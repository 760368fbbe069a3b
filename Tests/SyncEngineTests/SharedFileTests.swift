import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// One store file shared by two processes (an app and its extension), and by
/// two connections in one process.
@Suite(.timeLimit(.minutes(5))) struct SharedFileTests {
    static let keysJSON = """
        {"keys":[
          {"name":"health:steps","availability":"all","policy":"automaticSmall","security":"none"},
          {"name":"profile:name","availability":"all","policy":"manual","security":"none"}
        ]}
        """

    private func options(_ poll: Duration? = .milliseconds(20), _ folder: TempFolder? = nil) -> StoreOptions {
        var options = StoreOptions(encryption: folder.map { .keyFile(path: $0.file("master.key")) })
        options.externalChangePollInterval = poll
        return options
    }

    @Test func aSecondConnectionsWritesInvalidateTheCacheAndReachObservers() async throws {
        let folder = TempFolder()
        let app = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: TestKeys.registry(), options: options(nil, folder))
        let widget = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: TestKeys.registry(), options: options(nil, folder))
        #expect(try app.value(for: TestKeys.steps) == 0)   // cached absence
        let changes = app.changes(for: TestKeys.steps)
        try await widget.set(7, for: TestKeys.steps)
        #expect(try app.value(for: TestKeys.steps) == 0, "no check yet: the cache still answers")
        try app.checkForExternalChanges()
        #expect(try app.value(for: TestKeys.steps) == 7)
        let change = try await first(of: changes, "the other connection's change")
        #expect(change.isFromAnotherProcess == true && change.kind == .set && change.origin == .local)
        // Writes interleave without reusing versions or change sequence numbers.
        try await app.set(8, for: TestKeys.steps)
        try await widget.set("Ada", for: TestKeys.name)
        try await app.set(["a"], for: TestKeys.tags)
        let infos = try app.allEntryInfo()
        #expect(Set(infos.map(\.changeSequence)).count == infos.count)
        #expect(Set(infos.map(\.version)).count == infos.count)
        try widget.checkForExternalChanges()
        #expect(try widget.value(for: TestKeys.steps) == 8)
        // And everything replicates from either one.
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: TestKeys.registry(), options: options(.milliseconds(20), folder))
        try await withPeers(phone: app, watch: watch) { phone, _ in
            try phone.sync()
            try await eventually(watch, "every value on the watch") {
                try watch.value(for: TestKeys.steps) == 8 && watch.value(for: TestKeys.name) == "Ada" && watch.value(for: TestKeys.tags) == ["a"]
            }
        }
    }

    /// A write that fails (here a will-commit hook refuses it) after it caught
    /// up with another connection's commits: the observers it tells of them may
    /// write in reply. They were told from inside the failed transaction's
    /// lock, and their write failed with "used from inside one of its own
    /// write transactions", as after a write that succeeded they were not.
    @Test func anObserverOfAnotherWritersChangeMayWriteWhenTheWriteThatFoundItFailed() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry([TestKeys.steps, TestKeys.name, TestKeys.draft])
        let app = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: registry, options: options(nil))
        let widget = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: registry, options: options(nil))
        defer { app.close(); widget.close() }
        let failures = Mutex<[String]>([])
        let observation = app.observeChanges(matching: .key(TestKeys.steps.name)) { change in
            guard change.isFromAnotherProcess else { return }
            do { try app.setNow("seen", for: TestKeys.name) } catch { failures.withLock { $0.append("\(error)") } }
        }
        defer { observation.cancel() }
        app.addWillCommitHook { changes in
            if changes.contains(where: { $0.key == TestKeys.draft.name }) { throw SyncError(.invalidConfiguration, "no drafts") }
        }
        try await widget.set(5, for: TestKeys.steps)
        #expect(throws: SyncError.self) { try app.setNow("x", for: TestKeys.draft) }
        #expect(failures.withLock { $0 } == [], "the observer's write failed: \(failures.withLock { $0 })")
        #expect(try app.value(for: TestKeys.name) == "seen")
    }

    /// The timer notices other writers without any call; its looks that find
    /// no other writer's commits grow apart (5 ms doubling up to a second
    /// here), a commit of another connection after them is still seen, and
    /// the look after that one is 5 ms away again.
    @Test func theTimerNoticesOtherWritersAndItsEmptyLooksGrowApart() async throws {
        let folder = TempFolder()
        let app = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: TestKeys.registry(), options: options(.milliseconds(5), folder))
        let waits = app.timedWaits.subscribe()
        let looks = try await timedWaits(in: waits, until: .seconds(1), "the empty looks to grow a second apart") {
            if case .externalLook(let wait) = $0 { wait } else { nil }
        }
        // (The first looks may come before the subscription: what it saw is the end of the schedule.)
        let schedule: [Duration] = [10, 20, 40, 80, 160, 320, 640, 1_000].map { .milliseconds($0) }
        #expect(looks.count >= 4 && Array(schedule.suffix(looks.count)) == looks, "looks: \(looks)")
        let widget = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: TestKeys.registry(), options: options(nil, folder))
        let steps = StoredValue(TestKeys.steps, store: app)
        #expect(steps.value == 0)
        try await widget.set(21, for: TestKeys.steps)
        try await eventually(app, "the timer to notice the other writer") { steps.value == 21 }
        _ = try await timedWaits(in: waits, until: .milliseconds(5), "the look after a found commit to be 5 ms away") {
            if case .externalLook(let wait) = $0 { wait } else { nil }
        }
    }

    /// The timer's look never waits for the writer (a thread of the
    /// concurrency pool blocked behind a batch being applied): while a
    /// transaction holds the connection it returns at once; that transaction
    /// looked when it began.
    @Test func theTimersLookNeverWaitsForATransaction() async throws {
        let folder = TempFolder()
        let app = try SyncStore(path: folder.file("shared.sqlite"), role: .phone, registry: TestKeys.registry(), options: options(nil, folder))
        let (entered, enter) = AsyncStream.makeStream(of: Void.self)
        let release = DispatchSemaphore(value: 0)
        let (ended, end) = AsyncStream.makeStream(of: Void.self)
        Thread.detachNewThread {
            _ = try? app.database.write { _ in
                enter.yield()
                release.wait()
            }
            end.yield()
        }
        var iterator = entered.makeAsyncIterator()
        _ = await iterator.next()  // the transaction is open
        let outcome = await Result {
            try await withDeadline("the timer's look to return while a transaction is open") {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    Thread.detachNewThread {
                        _ = try? app.lookForExternalChangesUnlessBusy()
                        done.resume()
                    }
                }
            }
        }
        release.signal()
        var endIterator = ended.makeAsyncIterator()
        _ = await endIterator.next()
        try outcome.get()
    }

    /// While another process holds the replication lock, a dialing peer looks
    /// for it after 250 ms, then less and less often (up to every 2 s), and
    /// takes over once the lock is released.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/flock"), "holds the lock with flock(1) (util-linux)"))
    func aPeerWaitingForTheReplicationLockLooksLessAndLessOften() async throws {
        let pair = try Pair()
        let path = pair.phone.path
        // Another process holds the lock (flock(1) on the lock file), and says so once it does.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        // (-o: only flock itself holds it, not its command, which ends when its input closes.)
        holder.arguments = ["-o", ReplicationLock.lockPath(for: path), "-c", "echo locked; exec cat >/dev/null"]
        let said = Pipe(), input = Pipe()
        holder.standardOutput = said
        holder.standardInput = input
        try holder.run()
        defer {
            if holder.isRunning { kill(holder.processIdentifier, SIGKILL) }
            try? input.fileHandleForWriting.close()
            waitForExit(holder, within: .seconds(10))
        }
        var lines = SyncEngineTests.lines(of: said).makeAsyncIterator()
        #expect(await lines.next() == "locked")

        let secret = PairingSecret.generate()
        let tcp = TCPConfiguration(secret: secret)
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let watch = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let server = Task { await watch.serve(listener) }
        let phone = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(50))
        let waits = pair.phone.timedWaits.subscribe()
        let dialing = Task { await phone.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        let outcome = await Result {
            let looks = try await timedWaits(in: waits, until: .seconds(2), "the looks for the lock to grow 2 s apart") {
                if case .replicationLock(let wait) = $0 { wait } else { nil }
            }
            #expect(looks == [250, 500, 1_000, 2_000].map { .milliseconds($0) })
            #expect(!phone.isConnected)
            kill(holder.processIdentifier, SIGKILL)
            try await reachability(of: [phone], becomes: true, "the phone to take over once the lock is free")
        }
        dialing.cancel()
        await listener.close()
        server.cancel()
        _ = await (dialing.value, server.value)
        try outcome.get()
    }

    @Test func twoProcessesOnOneFileSeeEachOtherAndOnlyOneReplicates() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(Self.keysJSON.utf8).write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        let secret = PairingSecret.generate()
        try secret.write(to: secretFile)
        let registry = try KeyRegistry.load(jsonFile: keys)
        let steps = Key<Int>("steps", in: Namespace("health"), default: 0)
        let sharedPath = folder.file("phone.sqlite")

        // This process: the "app", replicating first (over an in-memory link to one watch).
        let app = try SyncStore(path: sharedPath, role: .phone, registry: registry, options: options())
        let appWatch = try SyncStore(path: folder.file("watch-a.sqlite"), role: .watch, registry: registry, options: options())
        let config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let (a, b) = InMemoryConnection.makePair()
        let appPeer = SyncPeer(store: app, configuration: config, tickInterval: .milliseconds(50))
        let appSession = Task { await appPeer.run(over: a) }
        let appWatchSession = Task { await SyncPeer(store: appWatch, configuration: config, tickInterval: .milliseconds(50)).run(over: b) }
        // This process's session holds the replication lock before the other process starts.
        try await appPeer.waitUntilIdle(timeout: waitLimit)

        // The watch the "extension" process will reach over TCP.
        let watch = try SyncStore(path: folder.file("watch-b.sqlite"), role: .watch, registry: registry, options: options())
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
        let watchPeer = SyncPeer(store: watch, configuration: config, tickInterval: .milliseconds(50))
        let server = Task { await watchPeer.serve(listener) }

        // The other process: `syncsim node` on the same file, trying to replicate too.
        let child = try NodeProcess(["--role", "phone", "--db", sharedPath, "--keys", keys, "--secret-file", secretFile,
                                     "--connect", "127.0.0.1:\(listener.port)"])
        defer { child.stop() }   // also when a wait below fails

        // 1. It may not replicate while this process does.
        let locked = try await child.next("the child's replication-locked error") { $0["event"] as? String == "error" }
        let lockedError = (locked["error"] as? String) ?? ""
        #expect(lockedError.hasPrefix("replication-locked"))
        #expect(!watchPeer.isConnected)

        // 2. Its writes reach this process's cache and observers.
        #expect(try app.value(for: steps) == 0)
        let changes = app.changes(for: steps)
        child.send("put health:steps 7")
        #expect(try await child.reply("put health:steps")["ok"] as? Bool == true)
        let change = try await first(of: changes, "the child's write to reach this process")
        #expect(change.isFromAnotherProcess == true)
        #expect(try app.value(for: steps) == 7)
        // … and this process's replication sends them.
        try await eventually(appWatch, "the child's write on the app's watch") { try appWatch.value(for: steps) == 7 }

        // 3. This process's writes reach it (`get` reads what the file holds now).
        try await app.set(8, for: steps)
        child.send("get health:steps")
        let seen = try await child.reply("get health:steps")["value"] as? Int
        #expect(seen == 8)

        // 4. This process stops replicating: the other takes over, with every change.
        await a.close()
        try await withDeadline("this process's sessions to end") { _ = await (appSession.value, appWatchSession.value) }
        try await child.next("the child to connect to the watch") { $0["event"] as? String == "connected" }
        try await eventually(watch, "this process's write on the child's watch") { try watch.value(for: steps) == 8 }
        child.send("quit")
        #expect(try await exitStatus(of: child.process, "the child to quit") == 0)
        await listener.close()
        server.cancel()
        try await withDeadline("the watch's server to stop") { _ = await server.value }
    }
}

import Dispatch
import Logging
import Synchronization
import SyncTransport

/// Runs replication sessions for one store over any `FrameConnection`
/// (in-memory or TCP): the async shell around `ReplicationEndpoint`. A phone
/// runs one session per watch at once (each watch reads the store's stream of
/// changes from its own cursor; a watch's change reaches the others through
/// the phone). A session newly established with a peer ends any older one
/// with the same peer (a stale connection: one device runs one session at a time).
///
/// ```swift
/// let peer = SyncPeer(store: store, configuration: .init(pairingEpoch: secret.epoch))
/// try await peer.run(over: connection)   // until the connection ends
/// ```
public final class SyncPeer: Sendable {
    public let store: SyncStore
    public let configuration: ReplicationConfiguration
    private let state = Mutex(State())
    private let idleChanges = Broadcaster<Bool>()
    private let clock: any PhysicalClock
    private let tickInterval: Duration
    private let quietTickInterval: Duration
    /// Bumped when a session applied entries that the other sessions must send
    /// (only while there are several): their idea of "idle" is then stale.
    private let forwarded = Atomic<Int>(0)
    private let loopTurns = LoopTurns()
    /// Publishes `isReachable` each time it changes (`reachabilityChanges()`).
    let reachabilityHub = Broadcaster<Bool>()
    /// Queued delivery's state per mailbox (`SyncPeer+Mailbox`).
    let queuedDrivers = Mutex<[QueuedDriverKey: MailboxReplicator]>([:])
    /// The thread running a queued round, which holds `queuedDrivers` (0: none).
    let queuedRoundThread = Atomic<UInt>(0)
    /// Each driver's `peerNode` as its last round left it: read without waiting for a round (`isLive`).
    let queuedPeerNodes = Mutex<[QueuedDriverKey: UInt32]>([:])
    /// Tests only: called by `isLive(through:)` as it begins.
    let liveCheckHook = Mutex<(@Sendable () -> Void)?>(nil)
    /// Where `runQueued`'s rounds run (`deliverQueuedOffPool`): a serial queue
    /// of its own, whose thread may block in `fsync` without holding one of the
    /// few threads of Swift concurrency's cooperative pool.
    let queuedRounds = DispatchQueue(label: "SyncEngine.SyncPeer.queued-rounds")
    /// When each peer's sessions were last replaced by newer ones (`SyncPeer+SharedNodeID`).
    let replacements = Mutex<ReplacementLog>(ReplacementLog())

    private struct Session {
        var connected = false
        var idle = false
        var generation = -1
        var peerNode: UInt32?
        /// The pairing the session's connection authenticated with (else the configured one).
        var pairingEpoch: String?
    }

    private struct State {
        var sessions: [Int: Session] = [:]
        /// Each running session's inputs, for requests from the app.
        var inputs: [Int: AsyncStream<Input>.Continuation] = [:]
        /// Ends each running session from outside its loop, with the reason (`runSession`'s `end`).
        var enders: [Int: @Sendable (String) -> Void] = [:]
        var nextSession = 0
        /// Whether the last published aggregate state was idle.
        var idle = false
        /// Whether the last published reachability was reachable.
        var reachable = false
        /// Peers (node ids) asked for their manual changes whose session ended
        /// before the answer came: the next session with each asks again.
        var unansweredManualRequests: Set<UInt32> = []
        /// Sessions told to end because a newer one with the same peer was established.
        var replaced: Set<Int> = []
    }

    private enum Input: Sendable {
        /// A frame from the peer, with its message as the reader decoded it (beside the loop).
        case frame(Frame, decoded: Result<SyncMessage, any Error>)
        case closed(String)
        case localChange
        case tick
        case requestManual
        /// The deadline of commits held back to join a batch (`BurstCoalescing`) may have passed.
        case releaseHeld
        /// Hand what keeps the session from being idle to `reply` (`idleBlockers(within:)`).
        case describeIdle(reply: @Sendable ([String]) -> Void)
    }

    /// A session wakes every `tickInterval` (for resends, timeouts and what
    /// is left to send) while it has something to do; while it is idle, with
    /// nothing to send again, its ticks grow apart, doubling up to
    /// `quietTickInterval` (a device at rest is not woken several times a
    /// second). Local writes, frames and `sync()` wake a session at once whatever its ticks.
    public init(store: SyncStore, configuration: ReplicationConfiguration, clock: any PhysicalClock = SystemClock(),
                tickInterval: Duration = .milliseconds(200), quietTickInterval: Duration = .seconds(5)) {
        self.store = store
        self.configuration = configuration
        self.clock = clock
        self.tickInterval = tickInterval
        self.quietTickInterval = quietTickInterval
    }

    /// Whether a session with some peer is established right now.
    public var isConnected: Bool { state.withLock { $0.sessions.values.contains { $0.connected } } }

    /// The turns its session loops took so far for anything but a tick or an idle
    /// check: frames, local changes, manual requests, held commits released.
    @_spi(Testing)
    public var sessionLoopTurns: Int { loopTurns.value }

    /// Returns once the session loops took more than `turns` turns in all.
    @_spi(Testing)
    public func sessionLoopTurns(exceeding turns: Int) async { await loopTurns.wait(exceeding: turns) }

    /// The peers (node ids) with an established session right now.
    public var connectedPeers: [UInt32] {
        state.withLock { $0.sessions.values.filter(\.connected).compactMap(\.peerNode).sorted() }
    }

    /// Whether a session is established with `node`, or, while the node is
    /// not known (nil), with any peer of the pairing `epoch`.
    func isConnected(to node: UInt32?, ofPairing epoch: String) -> Bool {
        state.withLock { state in
            state.sessions.values.contains { session in
                session.connected && (node.map { session.peerNode == $0 } ?? (session.pairingEpoch == epoch))
            }
        }
    }

    /// Local writes, `sync()` calls, changes applied from the mailbox and
    /// forwarded entries so far: an idle state computed before the latest of them is stale.
    private var generation: Int {
        store.localGeneration.load(ordering: .sequentiallyConsistent) &+ forwarded.load(ordering: .sequentiallyConsistent)
    }

    /// Asks every peer with a running session for its manual changes: the
    /// peer releases them as its own `sync()` would, unless its
    /// `ReplicationConfiguration.answersManualRequests` declines. Its answer
    /// is a `manualRequestAnswered` event here (and a `manualRequestReceived`
    /// event there); the changes follow as usual. A request whose session
    /// ends before its answer is sent again when the next session with that
    /// peer is established. A peer of protocol 1 (an older app) is never
    /// asked: an `.error` event (`unsupported-version`) says so. Returns how
    /// many established sessions the request went to (0 when none is).
    @discardableResult
    public func requestManualChanges() -> Int {
        let inputs = state.withLock { state in state.inputs.filter { state.sessions[$0.key]?.connected == true }.map(\.value) }
        for input in inputs { input.yield(.requestManual) }
        return inputs.count
    }

    /// Runs one session over `connection` until it closes or fails, or the
    /// store closes. Returns the reason it ended; never throws for network
    /// trouble (reconnecting is the caller's loop).
    @discardableResult
    public func run(over connection: any FrameConnection) async -> String {
        await runSession(over: connection).reason
    }

    /// `run(over:)`, with the error the session failed with (nil: it ended without one).
    func runSession(over connection: any FrameConnection) async -> (reason: String, failure: SyncError?) {
        if store.isClosed {
            await connection.close()
            return (SyncPeer.closedStoreReason(store.path), nil)
        }
        do {
            try ReplicationLock.acquire(for: store)
        } catch {
            // The peer hears why (not where: the store's path stays here), instead of a bare close.
            let why = SyncMessage.ErrorMessage(code: error.code.rawValue, message: "the peer's store is replicated by another process or store right now; a session waits until that one ends")
            try? await connection.send(SyncMessage.error(why).frame())
            await connection.close()
            store.emit(.error(error))
            return (error.description, error)
        }
        defer { ReplicationLock.release(for: store) }
        let session = state.withLock { state -> Int in
            defer { state.nextSession += 1 }
            state.sessions[state.nextSession] = Session()
            return state.nextSession
        }
        let (inputs, continuation) = AsyncStream.makeStream(of: Input.self, bufferingPolicy: .unbounded)
        state.withLock { $0.inputs[session] = continuation }
        let gate = ReadAheadGate(credits: configuration.readAheadFrames)
        // Local commits wake the session loop straight from the committing thread (no
        // task between them), one signal at a time: the loop clears it before it reads.
        let localChangeSignalled = LocalChangeSignal()
        let localWrites = store.localWrites.observe(where: { localChangeSignalled.concerns(origin: $0) }) { _ in
            if localChangeSignalled.raise() { continuation.yield(.localChange) }
        }
        defer { localWrites.cancel() }
        // Ends the session from outside its loop. The loop may be suspended in `send` (a peer that
        // does not read, an app transport's backpressure) and read no input until it returns: the
        // connection, closed, makes that send throw ("throws once the connection is closed").
        let endRequested = Mutex<String?>(nil)
        let end: @Sendable (String) -> Void = { why in
            endRequested.withLock { $0 = $0 ?? why }
            continuation.yield(.closed(why))
            Task { await connection.close() }
        }
        state.withLock { $0.enders[session] = end }
        // Closing the store ends the session (the peer sees the connection close).
        let storeClosing = store.whenClosed { end(SyncPeer.closedStoreReason(self.store.path)) }
        defer { storeClosing.cancel() }
        // A session's hello named the store's node id: once the store takes another (its phone
        // refused it through the mailbox, or the app renewed it), the session starts again under it.
        let renewal = store.nodeRenewals.observe(where: { _ in true }) { renewed in
            end("this store took a new node id (\(String(renewed, radix: 16))); the session starts again under it")
        }
        defer { renewal.cancel() }
        // Acknowledgements go out once their commits are on stable storage. The fsync runs
        // beside the session loop (group commit), which goes on applying what arrives meanwhile.
        let (ackSignals, ackSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let awaitingSync = AcknowledgementSyncQueue(interval: configuration.acknowledgementSyncInterval,
                                                    atOnceFrom: configuration.window / 2) { ackSignal.yield() }
        let store = self.store

        // The session's pairing epoch is the one this connection authenticated with (a phone
        // holds one pairing per watch), else the configured one.
        var sessionConfiguration = configuration
        sessionConfiguration.pairingEpoch = connection.pairingEpoch ?? configuration.pairingEpoch
        // The store behind its port; events and counters reported by this driver to the store's public streams.
        // The session is recorded as established before its `.connected` event goes out: an app
        // that hears the event finds the peer in `connectedPeers`.
        let epoch = sessionConfiguration.pairingEpoch
        let reporter = StoreReporter(store) { [weak self] node in
            self?.updateState(session, Session(connected: true, peerNode: node, pairingEpoch: epoch))
        }
        let endpoint = ReplicationEndpoint(port: SQLiteReplicationPort(store), reporter: reporter,
                                           configuration: sessionConfiguration, retransmits: !connection.deliversEveryFrame)
        endpoint.defersAcknowledgementSync = true
        endpoint.defersCursorRecord = true
        endpoint.framesPerPump = 1
        var reason = "closed"
        // The reader and the acknowledger are child tasks of
        // this session: when the session loop ends, the connection is closed and they all end with it.
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    for try await frame in connection.inbound {
                        await gate.acquire()
                        // Decoded here, so the loop's turn for the frame is only the apply.
                        continuation.yield(.frame(frame, decoded: Result { try SyncMessage(frame: frame) }))
                    }
                    // Cancelled, the inbound stream ends as if the peer had closed: this side stopped.
                    continuation.yield(.closed(Task.isCancelled ? SyncPeer.cancelledReason : "the peer closed the connection"))
                } catch {
                    continuation.yield(.closed(Task.isCancelled ? SyncPeer.cancelledReason : "\(error)"))
                }
            }
            group.addTask {
                for await _ in ackSignals {
                    guard let frames = awaitingSync.takeAll() else { continue }
                    do {
                        try await store.syncCommittedAsync()
                        for frame in frames { try await connection.send(frame) }
                    } catch {
                        continuation.yield(.closed(Task.isCancelled ? SyncPeer.cancelledReason : "acknowledgements could not be sent durably: \(error)"))
                        return
                    }
                }
            }
            // Off the cooperative pool where the loop's applies wait for the disk (`SessionExecutor.forLoop`).
            reason = await withTaskCancellationHandler {
                await withTaskExecutorPreference(SessionExecutor.forLoop(of: store)) {
                    await sessionLoop(endpoint, session: session, inputs: inputs, connection: connection, gate: gate,
                                      localChangeSignalled: localChangeSignalled,
                                      releaseHeld: { continuation.yield(.releaseHeld) }, tick: { continuation.yield(.tick) },
                                      endInputs: { continuation.yield(.closed("no more frames")) }) { durable in
                        awaitingSync.hold(durable, now: .now)
                    }
                }
            } onCancel: {
                end(SyncPeer.cancelledReason)
            }
            // Ended from outside (the store closed, …): that is why, not the failed send it caused.
            if let why = endRequested.withLock({ $0 }) { reason = why }
            awaitingSync.cancelTimer()
            await connection.close()
            ackSignal.finish()
            gate.open()
            group.cancelAll()
        }
        // Commits whose acknowledgements still waited for their sync (spaced, or not taken before
        // the session ended, or its task cancelled) go to stable storage now, a watch's cursor among them.
        if awaitingSync.takeAll() != nil { try? await store.syncCommittedAsync() }
        // It records how far the peer's stream was received: a write, away from a busy writer as the loop's.
        var writerWait: SessionExecutor?
        await SessionExecutor.awayFromABusyWriter(store, onPool: !SessionExecutor.appliesWaitForDisk(store), spare: &writerWait) {
            endpoint.connectionLost()
        }
        let peerNode = endpoint.peerNode
        updateState(session, nil)
        // A request handed to the loop once it stopped taking inputs (its connection closing) was never sent.
        continuation.finish()
        var unanswered = endpoint.awaitsManualReply
        for await input in inputs { if case .requestManual = input { unanswered = true } }
        if unanswered, let peerNode { askAgain(peerNode) }
        store.emit(.disconnected(reason: reason), peer: peerNode)
        return (reason, endpoint.failure)
    }

    /// Feeds the session's inputs to the endpoint and sends what it answers,
    /// until the connection closes or the session fails; returns why it ended.
    private func sessionLoop(_ endpoint: ReplicationEndpoint, session: Int, inputs: AsyncStream<Input>, connection: any FrameConnection,
                             gate: ReadAheadGate, localChangeSignalled: LocalChangeSignal, releaseHeld: @escaping @Sendable () -> Void,
                             tick: @escaping @Sendable () -> Void,
                             endInputs: @escaping @Sendable () -> Void, holdForSync: ([Frame]) -> Void) async -> String {
        // The one timer for held commits, and the deadline it wakes the loop at.
        var releaseTimer: (task: Task<Void, Never>, deadline: ContinuousClock.Instant)?
        // The one timer for ticks, and the deadline it wakes the loop at (`TickSchedule`).
        var tickTimer: (task: Task<Void, Never>, deadline: ContinuousClock.Instant)?
        var ticks = TickSchedule(base: tickInterval, quiet: quietTickInterval)
        // On the pool (`.normal`), an input that finds the writer busy is handled on this queue (`awayFromABusyWriter`).
        let onPool = !SessionExecutor.appliesWaitForDisk(store)
        var writerWait: SessionExecutor?
        defer {
            releaseTimer?.task.cancel()
            tickTimer?.task.cancel()
        }
        do {
            for frame in endpoint.start(now: clock.nowMilliseconds()) { try await connection.send(frame) }
            tickTimer = SyncPeer.timer(at: .now + tickInterval, tick)
            for await input in inputs {
                switch input {
                case .tick, .describeIdle: break
                default: loopTurns.add()
                }
                let now = clock.nowMilliseconds()
                let generation = self.generation
                if case .closed(let why) = input { return why }
                if case .tick = input, let timer = tickTimer, timer.deadline <= .now {
                    tickTimer = nil  // (a tick of a timer replaced after it fired leaves the newer timer in place)
                }
                if case .releaseHeld = input { releaseTimer = nil }
                let handshake = if case .frame(_, .success(.hello)) = input { true } else { false }
                let frames = await SessionExecutor.awayFromABusyWriter(store, onPool: onPool, blocks: handshake, spare: &writerWait) { () async -> [Frame] in
                    switch input {
                    case .frame(let frame, let decoded):
                        if case .success(.hello(let hello)) = decoded { await syncBeforeReceipt(answering: hello) }
                        let appliedBefore = endpoint.entriesApplied
                        let frames = endpoint.receive(frame, decoded: decoded, now: now)
                        if endpoint.entriesApplied > appliedBefore, state.withLock({ $0.sessions.count > 1 }) {
                            forwarded.add(1, ordering: .sequentiallyConsistent)
                        }
                        gate.release()
                        return frames
                    case .tick:
                        store.clock.followWallClock()  // writes made while it ran far ahead go out again once it is set right
                        return endpoint.tick(now: now)
                    case .localChange:
                        localChangeSignalled.lower()  // before reading: a commit from now on signals again
                        let commits = store.localCommitInstants
                        return endpoint.localChange(now: now, at: commits.latest ?? .now, previousCommit: commits.previous,
                                                    startedAt: commits.latestStarted)
                    case .releaseHeld: return endpoint.releaseHeld(now: now, at: .now, lastCommit: store.localCommitInstants.latest)
                    case .requestManual: return endpoint.requestManualChanges(now: now)
                    case .describeIdle(let reply):
                        reply(endpoint.idleBlockers)
                        return []
                    case .closed: return []  // returned above
                    }
                }
                for frame in frames { try await connection.send(frame) }
                // One batch at a time (`framesPerPump`): each is on its way while the next is made.
                while endpoint.pumpStoppedEarly {
                    let batch = await SessionExecutor.awayFromABusyWriter(store, onPool: onPool, spare: &writerWait) {
                        endpoint.pump(now: clock.nowMilliseconds())
                    }
                    for frame in batch { try await connection.send(frame) }
                }
                if let deadline = endpoint.heldUntil, releaseTimer.map({ $0.deadline > deadline }) ?? true {
                    releaseTimer?.task.cancel()
                    releaseTimer = SyncPeer.timer(at: deadline, tolerance: .microseconds(50), releaseHeld)
                }
                let durable = endpoint.takeFramesAwaitingSync()
                let cursorMoved = endpoint.takeCursorSyncRequest()
                // Acknowledgements wait for a WAL sync, at most one per interval (`AcknowledgementSyncQueue`).
                if !durable.isEmpty || cursorMoved { holdForSync(durable) }
                if let failure = endpoint.failure { return failure.description }
                if let peer = endpoint.peerNode { localChangeSignalled.sessionPeer = peer }
                let idle = endpoint.isIdle
                updateState(session, Session(connected: endpoint.isEstablished, idle: idle, generation: generation,
                                             peerNode: endpoint.peerNode, pairingEpoch: endpoint.configuration.pairingEpoch))
                let handled: TickSchedule.Handled = switch input {
                case .tick: .tick(sent: !frames.isEmpty)
                case .describeIdle: .diagnostics
                default: .other
                }
                let wait = ticks.next(after: handled, quiet: idle && !endpoint.waitsOnTimers)
                let deadline = ContinuousClock.now + wait
                if tickTimer.map({ $0.deadline > deadline }) ?? true {
                    tickTimer?.task.cancel()
                    tickTimer = SyncPeer.timer(at: deadline, tick)
                    store.timedWaits.publish(.tick(wait))
                }
            }
            // The inputs end early only when this task is cancelled.
            return Task.isCancelled ? SyncPeer.cancelledReason : "closed"
        } catch {
            // The peer may have said why it closed (an error message) in a frame read but not handled yet.
            await connection.close()
            let giveUp = Task {
                try? await Task.sleep(for: .seconds(1))
                endInputs()
            }
            defer { giveUp.cancel() }
            return await peerError(amongUnhandled: inputs, endpoint, gate: gate) ?? (Task.isCancelled ? SyncPeer.cancelledReason : "\(error)")
        }
    }

    /// A task that calls `fire` at `deadline` unless it is cancelled first.
    private static func timer(at deadline: ContinuousClock.Instant, tolerance: Duration? = nil,
                              _ fire: @escaping @Sendable () -> Void) -> (task: Task<Void, Never>, deadline: ContinuousClock.Instant) {
        (Task {
            try? await Task.sleep(until: deadline.cappedForSleep, tolerance: tolerance, clock: .continuous)
            if !Task.isCancelled { fire() }
        }, deadline)
    }

    /// After a send failed: the peer's error message among the frames still
    /// queued (until the reader ends, or `endInputs` gives up), handled as
    /// usual (its `.error` event), as its reason; nil when there is none.
    private func peerError(amongUnhandled inputs: AsyncStream<Input>, _ endpoint: ReplicationEndpoint, gate: ReadAheadGate) async -> String? {
        for await input in inputs {
            switch input {
            case .frame(let frame, let decoded):
                gate.release()
                guard frame.type == SyncMessage.MessageType.error.rawValue else { continue }
                _ = endpoint.receive(frame, decoded: decoded, now: clock.nowMilliseconds())
                if let failure = endpoint.failure { return failure.description }
            case .describeIdle(let reply): reply(["the session is ending"])
            case .closed: return nil
            case .tick, .localChange, .requestManual, .releaseHeld: continue
            }
        }
        return nil
    }

    /// Why a session ends when its task is cancelled (graceful shutdown, a
    /// reconnect loop or `serve` cancelled, a `syncsim node` quitting).
    static let cancelledReason = "stopped on this side: its task was cancelled (the app or node is stopping)"

    /// Why a session ends, or does not start, when its store is closed.
    static func closedStoreReason(_ path: String) -> String { "the store at \(path) was closed" }

    /// Another process (or, `byThisProcess`, another `SyncStore` of this one) replicates the file.
    static func lockedError(_ path: String, byThisProcess: Bool = false) -> SyncError {
        if byThisProcess {
            return SyncError(.replicationLocked, "another SyncStore of this process replicates the store file at \(path) (open a file once per process and share the store); this one stays local and retries when that one's sessions end")
        }
        return SyncError(.replicationLocked, "another process replicates the store at \(path) (it holds \(ReplicationLock.lockPath(for: path))); this one stays local and retries when it is released")
    }

    /// Records a session's state (nil: the session ended) and publishes the
    /// aggregate: idle when every session is established with nothing pending
    /// or in flight.
    private func updateState(_ session: Int, _ new: Session?) {
        let (changed, idle, reachability, replaced) = state.withLock { state -> (Bool, Bool, Bool?, [@Sendable (String) -> Void]) in
            let old = state.sessions[session]
            state.sessions[session] = new
            if new == nil {
                state.inputs[session] = nil
                state.enders[session] = nil
            }
            // A session newly established with a peer replaces any other with the same peer: one device
            // runs one session at a time (its replication lock), so the other's connection is stale
            // (half-open, its end not noticed yet) or a buggy or hostile peer's extra one.
            var replaced: [@Sendable (String) -> Void] = []
            if new == nil { state.replaced.remove(session) }
            // Newly established: a manual request an earlier session with its peer left unanswered is
            // asked again (looked up here, under the lock a session that ends with one takes: `askAgain`).
            if let peer = new?.peerNode, new?.connected == true, old?.connected != true,
               state.unansweredManualRequests.remove(peer) != nil, let input = state.inputs[session] {
                state.sessions[session]?.idle = false
                input.yield(.requestManual)
            }
            if let peer = new?.peerNode, new?.connected == true, old?.connected != true || old?.peerNode != peer,
               !state.replaced.contains(session) {
                for (other, running) in state.sessions where other != session && running.peerNode == peer && !state.replaced.contains(other) {
                    state.replaced.insert(other)
                    if let end = state.enders[other] { replaced.append(end) }
                }
            }
            let idle = !state.sessions.isEmpty && state.sessions.values.allSatisfy(\.idle)
            let generationMoved = new.map { $0.idle && $0.generation != old?.generation } ?? false
            let changed = idle != state.idle || (idle && generationMoved)
            state.idle = idle
            let reachable = state.sessions.values.contains { $0.connected }
            defer { state.reachable = reachable }
            return (changed, idle, reachable != state.reachable ? reachable : nil, replaced)
        }
        // Through its `end`: a replaced session may wait in `send` on its stale connection, and read no input.
        for end in replaced {
            end("replaced by a newer session with the same peer (node \(new?.peerNode.map { String($0, radix: 16) } ?? "?"))")
        }
        if !replaced.isEmpty, let peer = new?.peerNode { noteReplacement(of: peer) }
        if let reachability { reachabilityHub.publish(reachability) }
        if changed {
            idleChanges.publish(idle)
            if idle { store.emit(.idle) }
        }
    }

    /// A manual request to `peer` went unanswered with its session: a running session with the peer
    /// (a newer one, which replaced it) asks again at once, else the next one established does.
    private func askAgain(_ peer: UInt32) {
        let newer = state.withLock { state -> AsyncStream<Input>.Continuation? in
            if let running = state.sessions.first(where: { $0.value.connected && $0.value.peerNode == peer }),
               let input = state.inputs[running.key] {
                return input
            }
            state.unansweredManualRequests.insert(peer)
            return nil
        }
        newer?.yield(.requestManual)
    }

    /// Idle, and no local write, `sync()`, queued apply or forwarded entry happened since that was computed.
    private var isCurrentlyIdle: Bool {
        let generation = self.generation
        return state.withLock { state in
            !state.sessions.isEmpty && state.sessions.values.allSatisfy { $0.idle && $0.generation == generation }
        }
    }

    /// What keeps each running session from being idle, as its loop sees it
    /// now, one line per session that is not ("session with 2002: …"); a
    /// loop that does not answer within `timeout` (busy, or stuck in a send)
    /// is named as such. For diagnostics (a `waitUntilIdle` that times out
    /// names them in its error).
    public func idleBlockers(within timeout: Duration = .seconds(1)) async -> [String] {
        let sessions = state.withLock { state in
            state.inputs.map { (id: $0.key, input: $0.value, peer: state.sessions[$0.key]?.peerNode) }.sorted { $0.id < $1.id }
        }
        guard !sessions.isEmpty else { return ["no session"] }
        let (replies, reply) = AsyncStream.makeStream(of: (id: Int, reasons: [String]).self)
        for session in sessions {
            session.input.yield(.describeIdle { reply.yield((session.id, $0)) })
        }
        let answers = await withTaskGroup(of: Void.self) { group -> [Int: [String]] in
            group.addTask {
                try? await Task.sleep(for: timeout.cappedForSleep)
                reply.finish()
            }
            var answers: [Int: [String]] = [:]
            for await answer in replies {
                answers[answer.id] = answer.reasons
                if answers.count == sessions.count { break }
            }
            group.cancelAll()
            return answers
        }
        let blockers = sessions.compactMap { session -> String? in
            let name = "session with " + (session.peer.map { String($0, radix: 16) } ?? "a peer not known yet")
            guard let reasons = answers[session.id] else { return "\(name): its loop did not answer within \(timeout)" }
            return reasons.isEmpty ? nil : "\(name): " + reasons.joined(separator: "; ")
        }
        if blockers.isEmpty && !isCurrentlyIdle {
            return ["every session is idle, but not every one has looked since the latest local write, sync() or forwarded entry"]
        }
        return blockers
    }

    /// Waits until every session is established with nothing pending or in
    /// flight (and there is at least one); throws `.timeout` after `timeout`,
    /// naming what each session still waits for (`idleBlockers(within:)`),
    /// `.closed` as soon as the store is closed, and `CancellationError`
    /// as soon as the calling task is cancelled.
    public func waitUntilIdle(timeout: Duration) async throws {
        try store.checkOpen()
        let changes = idleChanges.subscribe()
        if isCurrentlyIdle { return }
        let (storeClosed, closing) = AsyncStream.makeStream(of: Void.self)
        let storeClosing = store.whenClosed { closing.finish() }
        defer { storeClosing.cancel() }
        let idle = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await idle in changes where idle && self.isCurrentlyIdle { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout.cappedForSleep)
                return false
            }
            group.addTask {
                for await _ in storeClosed {}
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        try store.checkOpen()
        if !idle && !isCurrentlyIdle {
            // A cancelled wait is not a timeout: the caller gave up, the peer did not fail to catch up.
            try Task.checkCancellation()
            let blockers = await idleBlockers(within: .milliseconds(500))
            let why = blockers.isEmpty ? (isConnected ? "changes are still in flight" : "no session with the peer") : blockers.joined(separator: " | ")
            throw SyncError(.timeout, "not idle after \(timeout): \(why)")
        }
    }
}

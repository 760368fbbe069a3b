import Foundation
import Logging
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Runs a phone and a watch peer, each with its own replication configuration, over `kind` while `body` runs.
func withConfiguredPeers(_ pair: Pair, over kind: LinkKind, phone phoneConfiguration: ReplicationConfiguration,
                         watch watchConfiguration: ReplicationConfiguration,
                         _ body: (SyncPeer, SyncPeer) async throws -> Void) async throws {
    let secret = PairingSecret.generate()
    var phoneConfiguration = phoneConfiguration, watchConfiguration = watchConfiguration
    phoneConfiguration.pairingEpoch = secret.epoch
    watchConfiguration.pairingEpoch = secret.epoch
    let phone = SyncPeer(store: pair.phone, configuration: phoneConfiguration, tickInterval: .milliseconds(50))
    let watch = SyncPeer(store: pair.watch, configuration: watchConfiguration, tickInterval: .milliseconds(50))
    switch kind {
    case .memory:
        let (a, b) = InMemoryConnection.makePair()
        let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        let outcome = await Result { try await body(phone, watch) }
        await a.close()
        try await withDeadline("both peers to stop after the connection closed") { for task in tasks { _ = await task.value } }
        try outcome.get()
    case .tcp:
        let tcp = TCPConfiguration(secret: secret)
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: tcp)
        let server = Task { await phone.serve(listener) }
        let client = Task { await watch.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: tcp) }
        let outcome = await Result { try await body(phone, watch) }
        client.cancel()
        await listener.close()
        server.cancel()
        try await withDeadline("the server and the client to stop") { _ = await (server.value, client.value) }
        try outcome.get()
    }
}

@Suite(.timeLimit(.minutes(5))) struct ManualRequestTests {
    static func isAnswer(_ event: SyncEvent) -> Bool { if case .manualRequestAnswered = event { true } else { false } }
    static func isRequest(_ event: SyncEvent) -> Bool { if case .manualRequestReceived = event { true } else { false } }

    /// The watch's `sync()` does not bring the phone's manual change; asking
    /// for it does: the phone releases it, both sides get an event, and the
    /// change arrives.
    @Test(arguments: LinkKind.allCases)
    func theWatchGetsThePhonesManualChangesByAskingForThem(over kind: LinkKind) async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)  // manual
        try await pair.phone.set(1, for: TestKeys.steps)
        let phoneEvents = pair.phone.events(), watchEvents = pair.watch.events()
        try await withConfiguredPeers(pair, over: kind, phone: ReplicationConfiguration(), watch: ReplicationConfiguration()) { phone, watch in
            try await eventually(pair.watch, "the automatic change") { try pair.watch.storedValue(for: TestKeys.steps) == 1 }
            #expect(try watch.sync() == 0)
            try await watch.waitUntilIdle(timeout: waitLimit)
            #expect(try pair.watch.storedValue(for: TestKeys.name) == nil, "the watch's sync() releases only the watch's changes")

            #expect(try watch.sync(includingPeer: true) == 0)
            #expect(try await first(of: phoneEvents, "the phone's request event", where: ManualRequestTests.isRequest)
                    == .manualRequestReceived(accepted: true, released: 1))
            #expect(try await first(of: watchEvents, "the watch's answer event", where: ManualRequestTests.isAnswer)
                    == .manualRequestAnswered(accepted: true, released: 1))
            try await eventually(pair.watch, "the phone's manual change") { try pair.watch.storedValue(for: TestKeys.name) == "Ada" }
            try await watch.waitUntilIdle(timeout: waitLimit)
            try await phone.waitUntilIdle(timeout: waitLimit)
        }
    }

    /// A phone that declines: the watch hears so, nothing is released.
    @Test func aPhoneMayDecline() async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)
        let phoneEvents = pair.phone.events(), watchEvents = pair.watch.events()
        var declining = ReplicationConfiguration()
        declining.answersManualRequests = { _ in false }
        try await withConfiguredPeers(pair, over: .memory, phone: declining, watch: ReplicationConfiguration()) { phone, watch in
            try await watch.waitUntilIdle(timeout: waitLimit)
            #expect(watch.requestManualChanges() == 1)
            #expect(try await first(of: phoneEvents, "the phone's request event", where: ManualRequestTests.isRequest)
                    == .manualRequestReceived(accepted: false, released: 0))
            #expect(try await first(of: watchEvents, "the watch's answer event", where: ManualRequestTests.isAnswer)
                    == .manualRequestAnswered(accepted: false, released: 0))
            try await watch.waitUntilIdle(timeout: waitLimit)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.name) == nil)
        #expect(try pair.phone.pendingSummary().manualWaiting == 1)
    }

    /// A protocol-1 phone (an older app) does not know the request: it is
    /// never sent (the session would fail), an `unsupported-version` error
    /// event says so, and the session goes on syncing.
    @Test func anOlderPeerIsNeverAsked() async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)
        let phoneEvents = pair.phone.events(), watchEvents = pair.watch.events()
        let phoneSaw = Mutex<[SyncEvent]>([])
        let collector = Task { for await event in phoneEvents { phoneSaw.withLock { $0.append(event) } } }
        var old = ReplicationConfiguration()
        old.protocolRange = 1...1
        try await withConfiguredPeers(pair, over: .memory, phone: old, watch: ReplicationConfiguration()) { phone, watch in
            try await watch.waitUntilIdle(timeout: waitLimit)
            #expect(watch.requestManualChanges() == 1)
            let error = try await first(of: watchEvents, "the watch's error event") { if case .error = $0 { true } else { false } }
            #expect(error == .error(SyncError(.unsupportedVersion, "the peer's app is too old to be asked for its manual changes (protocol 1); update it")))
            try await pair.phone.set(5, for: TestKeys.steps)
            try await eventually(pair.watch, "a later automatic change") { try pair.watch.storedValue(for: TestKeys.steps) == 5 }
            #expect(phone.isConnected && watch.isConnected)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.name) == nil)
        collector.cancel()
        let seen = phoneSaw.withLock { $0 }
        #expect(!seen.contains { if case .error = $0 { true } else { false } }, "the older phone saw no error: \(seen)")
    }

    /// The session ends before the phone hears the watch's request (the
    /// link drops as it is sent): the next session with the phone asks
    /// again, and the manual change arrives. It was lost before.
    @Test func aRequestLostWithItsSessionIsAskedAgainInTheNext() async throws {
        let pair = try Pair()
        try await pair.phone.set("Ada", for: TestKeys.name)  // manual
        let secret = PairingSecret.generate()
        let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch), tickInterval: .milliseconds(50))
        let watch = SyncPeer(store: pair.watch, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch), tickInterval: .milliseconds(50))
        let watchEvents = pair.watch.events()

        let (a, b) = InMemoryConnection.makePair()
        let cutting = RequestCuttingConnection(b)
        let first = [Task { await phone.run(over: a) }, Task { await watch.run(over: cutting) }]
        try await watch.waitUntilIdle(timeout: waitLimit)
        #expect(watch.requestManualChanges() == 1)
        try await withDeadline("the first session to end with the link") { for task in first { _ = await task.value } }
        #expect(cutting.cut.withLock { $0 }, "the request was cut, not sent")
        #expect(try pair.watch.storedValue(for: TestKeys.name) == nil)

        let (c, d) = InMemoryConnection.makePair()
        let second = [Task { await phone.run(over: c) }, Task { await watch.run(over: d) }]
        #expect(try await SyncEngineTests.first(of: watchEvents, "the answer to the request asked again",
                                                where: ManualRequestTests.isAnswer) == .manualRequestAnswered(accepted: true, released: 1))
        try await eventually(pair.watch, "the phone's manual change") { try pair.watch.storedValue(for: TestKeys.name) == "Ada" }
        await c.close()
        try await withDeadline("the second session to end") { for task in second { _ = await task.value } }
    }

    /// An old build's decoder refuses message types it does not know (so the
    /// new ones are sent only to protocol-2 peers): the goldens of the new
    /// messages have types beyond the first release's.
    @Test func theNewMessagesAreUnknownToTheFirstRelease() {
        #expect(SyncMessage.MessageType.caughtUp.rawValue == 8)
        #expect(SyncMessage.MessageType.manualRequest.rawValue == 9)
        #expect(SyncMessage.MessageType.manualReply.rawValue == 10)
        #expect(throws: SyncError.self) {
            _ = try SyncMessage(frame: SyncMessage.manualReply(.init(id: 1, accepted: false, released: 3, replyID: 2)).frame())
        }
    }
}

/// A connection that closes itself instead of sending a manual request (the
/// link drops just as the request goes out); the rest goes through.
final class RequestCuttingConnection: FrameConnection {
    private let base: InMemoryConnection
    /// Whether a request was cut.
    let cut = Mutex(false)

    init(_ base: InMemoryConnection) { self.base = base }

    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { base.deliversEveryFrame }

    func send(_ frame: Frame) async throws {
        guard frame.type == SyncMessage.MessageType.manualRequest.rawValue else { return try await base.send(frame) }
        cut.withLock { $0 = true }
        await base.close()
        throw TransportError(.closed, "the link dropped as the manual request was sent")
    }

    func close() async { await base.close() }
}

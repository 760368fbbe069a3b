import Synchronization
import Testing
@testable import SyncTransport

@Suite(.timeLimit(.minutes(5))) struct TCPLifecycleTests {
    let secret = PairingSecret.generate()

    /// Before: a dial cancelled during its handshake threw "closed: the peer
    /// closed the connection during the handshake" and logged the warning
    /// "rejected the peer during the handshake", though the peer had done
    /// nothing: this side closed the socket as its task was cancelled.
    @Test func aDialCancelledDuringItsHandshakeSaysSo() async throws {
        // Not run: the socket accepts, and nothing answers the dialer's hello.
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let logs = LogCapture()
        let (helloSent, sent) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let configuration = testConfiguration(secret, logs: logs) {
            $0.onWireBytes = { direction, _ in if direction == .outbound { sent.yield() } }
        }
        let dial = Task { try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: configuration) }
        _ = try await first(of: helloSent, "the dialer's hello")
        dial.cancel()
        let outcome = try await withDeadline("the cancelled dial to end") { await dial.result }
        await listener.close()
        if case .success(let connection) = outcome { await connection.close() }
        guard case .failure(let error) = outcome else { Issue.record("a dial nobody answered succeeded"); return }
        let failure = try #require(error as? TransportError)
        #expect(failure.message.contains("cancelled"), "\(failure)")
        #expect(!logs.all.contains { $0.contains("rejected the peer") }, "\(logs.all)")
    }

    @Test func silentPeerTimesOut() async throws {
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret) { $0.deadPeerTimeout = .milliseconds(300) })
        // The dialer never sends heartbeats within the test.
        let dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "the accepted connection")
        let end = try await inboundEnd(of: accepted)
        #expect(end.error?.code == .timeout)
        #expect(end.error?.message.contains("dead-peer timeout") == true)
        // The dialer sees the connection end.
        _ = try await inboundEnd(of: dialer)
        await listener.close()
    }

    @Test func heartbeatsKeepAnIdleConnectionAlive() async throws {
        let recorder = WireRecorder()
        let logs = LogCapture()
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret, logs: logs, tap: recorder) {
                // Generous margins: CPU-heavy tests run beside this one on two cores, and
                // both ends share this process's task pool (a loaded pool can starve the
                // sender's heartbeats for seconds, which two real devices never share).
                $0.deadPeerTimeout = .seconds(8)
                $0.heartbeatInterval = .milliseconds(100)
            })
        let dialer = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port,
            configuration: testConfiguration(secret) { $0.heartbeatInterval = .milliseconds(100) })
        let accepted = try await first(of: listener.connections, "the accepted connection")
        // Wait for 90 heartbeats (29 bytes each) to arrive: about 9 s, past the
        // 8 s timeout. Stop early (and fail) if the connection ends instead.
        enum Event { case bytes, closed }
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        let chunkWatcher = Task {
            for await _ in recorder.chunks { sink.yield(.bytes) }
        }
        let endWatcher = Task {
            do { for try await _ in dialer.inbound {} } catch {}
            sink.yield(.closed)
        }
        let start = recorder.bytes(.inbound).count
        // Within 3 minutes: on a starved pool they come late (the dead-peer timeout is what is tested).
        let closed = try await withDeadline("90 heartbeats", within: .seconds(180)) {
            for await event in events {
                if event == .closed { return true }
                if recorder.bytes(.inbound).count - start >= 90 * 29 { return false }
            }
            return true
        }
        if closed { Issue.record("the connection ended while only heartbeats flowed: \(logs.all.suffix(3))") }
        chunkWatcher.cancel()
        try await dialer.send(Frame(type: 1, payload: [1]))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [1])])
        #expect(accepted.statistics.framesReceived == 1, "heartbeats are not surfaced")
        await dialer.close()
        endWatcher.cancel()
        await listener.close()
    }

    @Test func handshakeTimesOut() async throws {
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(secret) { $0.handshakeTimeout = .milliseconds(200) })
        let port = listener.port
        _ = try await withDeadline("the listener to drop a client that never speaks") {
            try await withRawClient(port: port) { session in await session.readToEnd() }
        }
        #expect(try await first(of: listener.rejections, "the handshake timeout's rejection").code == .timeout)
        await listener.close()
    }

    @Test func slowReaderMakesTheSenderWait() async throws {
        let bound = 64 << 10
        let frameSize = 32 << 10
        let count = 1_024  // 32 MiB: far more than the socket buffers hold
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0,
            configuration: testConfiguration(secret) { $0.maxBufferedInboundBytes = bound })
        let sender = try await TCPTransport.connectTCP(
            host: "127.0.0.1", port: listener.port,
            configuration: testConfiguration(secret) {
                $0.maxPendingOutboundBytes = bound
                $0.limits.compressionThreshold = .max
            })
        let receiver = try await first(of: listener.connections, "the receiving connection")
        let payload = randomBytes(frameSize - 4, seed: 1)
        let sent = Mutex(0)
        // Either the sender suspends (backpressure), or it sends everything (no backpressure: fail).
        enum Outcome { case suspended, finished }
        let (outcomes, outcomeSink) = AsyncStream.makeStream(of: Outcome.self)
        let sendTask = Task {
            defer { outcomeSink.yield(.finished) }
            for index in 0..<count {
                var writer = ByteWriter()
                writer.writeUInt32(UInt32(index))
                try await sender.send(Frame(type: 1, payload: writer.bytes + payload))
                sent.withLock { $0 += 1 }
            }
        }
        let watcher = Task {
            for await _ in sender.sendSuspensions {
                outcomeSink.yield(.suspended)
                return
            }
        }
        let outcome = try await first(of: outcomes, "the sender to suspend or finish")
        watcher.cancel()
        #expect(outcome == .suspended)
        #expect(sender.pendingOutboundBytes <= bound + frameSize + FrameEnvelope.headerSize)
        #expect(sent.withLock { $0 } < count, "the receiver has read nothing: the sender cannot have sent 32 MiB")
        #expect(receiver.statistics.framesReceived * frameSize <= 16 << 20)

        // Now read everything, in order.
        // 32 MiB through a throttled reader: minutes on a loaded machine; a stall still fails.
        let index = try await withDeadline("all \(count) frames", within: .seconds(240)) {
            var index = 0
            for try await frame in receiver.inbound {
                var reader = ByteReader(frame.payload)
                #expect(try reader.readUInt32() == UInt32(index))
                index += 1
                if index == count { break }
            }
            return index
        }
        try await withDeadline("the sender to finish") { try await sendTask.value }
        #expect(index == count)
        await sender.close()
        await listener.close()
    }

    @Test func listenerCloseFinishesConnections() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        #expect(listener.port > 0)
        await listener.close()
        #expect(try await all(of: listener.connections, "the connections to end").isEmpty)
        await expectCode(.connectFailed) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        }
    }

    // MARK: Reconnecting

    @Test func backoffGrowsAndIsCapped() {
        let policy = ReconnectPolicy(initialDelay: .milliseconds(100), maxDelay: .seconds(1), multiplier: 2, jitter: 0)
        var random = SeededRandom(seed: 1)
        let delays = (1...6).map { policy.delay(afterFailures: $0, using: &random) }
        #expect(delays == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1), .seconds(1)])
        let jittered = ReconnectPolicy(initialDelay: .milliseconds(100), maxDelay: .seconds(1), jitter: 0.5)
        var values: Set<Duration> = []
        for _ in 0..<100 {
            let delay = jittered.delay(afterFailures: 1, using: &random)
            #expect(delay >= .milliseconds(50) && delay <= .milliseconds(150))
            values.insert(delay)
        }
        #expect(values.count > 50)
    }

    @Test func dialerRetriesFailedAttempts() async throws {
        let failuresLeft = Mutex(3)
        let dialer = ReconnectingDialer(
            policy: ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(4)), seed: 1
        ) {
            if failuresLeft.withLock({ left -> Bool in defer { left -= 1 }; return left > 0 }) {
                throw TransportError(.connectFailed, "refused")
            }
            return InMemoryConnection.makePair().0
        }
        #expect(try await nextConnection(of: dialer) != nil)
        #expect(dialer.attempts == 4)
        await dialer.close()
        #expect(try await nextConnection(of: dialer) == nil)
    }

    @Test func dialerReconnectsAfterTheConnectionEnds() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let dialer = ReconnectingDialer(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret),
            policy: ReconnectPolicy(initialDelay: .milliseconds(1), maxDelay: .milliseconds(10)))
        for round in 0..<3 {
            let connection = try #require(try await nextConnection(of: dialer))
            let accepted = try await first(of: listener.connections, "the listener's connection in round \(round)")
            try await connection.send(Frame(type: 1, payload: [UInt8(round)]))
            #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [UInt8(round)])])
            await accepted.close()  // the listener drops the connection
            #expect(try await inboundEnd(of: connection).error == nil)
        }
        #expect(dialer.attempts == 3)
        await dialer.close()
        #expect(try await nextConnection(of: dialer) == nil)
        await listener.close()
    }
}

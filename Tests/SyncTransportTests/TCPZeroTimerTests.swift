import Testing
@testable import SyncTransport

/// A heartbeat interval or dead-peer timeout of zero or less, as an app sets
/// to turn them off. Before: a zero heartbeat interval sent heartbeats back
/// to back, as fast as the socket took them (a core busy on each end), and a
/// zero dead-peer timeout closed every connection with `.timeout` as soon as
/// it was established. Now zero or less turns each off.
@Suite(.timeLimit(.minutes(5))) struct TCPZeroTimerTests {
    enum Off: CaseIterable { case heartbeats, watchdog }

    /// The listener sets the timer to zero, the dialer to minus one second.
    @Test(arguments: Off.allCases) func zeroOrLessTurnsItOff(_ off: Off) async throws {
        let secret = PairingSecret.generate()
        func turnOff(_ duration: Duration) -> (inout TCPConfiguration) -> Void {
            { configuration in
                switch off {
                case .heartbeats: configuration.heartbeatInterval = duration
                case .watchdog: configuration.deadPeerTimeout = duration
                }
            }
        }
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, turnOff(.zero)))
        let dialed = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret, turnOff(.seconds(-1))))
        let accepted = try await first(of: listener.connections, "the listener's connection")
        let rounds = 3
        for round in 0..<rounds {
            try await dialed.send(Frame(type: 1, payload: [UInt8(round)]))
            #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [UInt8(round)])])
            try await accepted.send(Frame(type: 2, payload: [UInt8(round)]))
            #expect(try await receive(1, from: dialed) == [Frame(type: 2, payload: [UInt8(round)])])
        }
        // Only the frames sent crossed, no heartbeat: each is a header, one payload byte and the seal's tag.
        let frameBytes = FrameEnvelope.headerSize + 1 + FrameSealer.tagSize
        #expect(accepted.statistics.bytesReceived == rounds * frameBytes)
        #expect(dialed.statistics.bytesReceived == rounds * frameBytes)
        await dialed.close()
        #expect(try await inboundEnd(of: accepted).error == nil, "the connection ended normally, by our close")
        await accepted.close()
        await listener.close()
    }

    /// Before: a positive interval of 1 ns was kept as it was, and the
    /// connection sent heartbeats back to back (as zero did before it turned
    /// them off). A positive interval below `minimumHeartbeatInterval`
    /// (10 ms) is taken as it, given to `init` or set later; zero or less
    /// stays as given (off), as does any larger interval.
    @Test func aTinyPositiveHeartbeatIntervalIsTakenAsTheMinimum() {
        let secret = PairingSecret.generate()
        for tiny: Duration in [.nanoseconds(1), .microseconds(999), .milliseconds(9)] {
            #expect(TCPConfiguration(secret: secret, heartbeatInterval: tiny).heartbeatInterval == .milliseconds(10), "\(tiny)")
            var configuration = TCPConfiguration(secret: secret)
            configuration.heartbeatInterval = tiny
            #expect(configuration.heartbeatInterval == .milliseconds(10), "\(tiny)")
        }
        for kept: Duration in [.zero, .seconds(-1), .milliseconds(10), .milliseconds(11), .seconds(5)] {
            #expect(TCPConfiguration(secret: secret, heartbeatInterval: kept).heartbeatInterval == kept, "\(kept)")
            var configuration = TCPConfiguration(secret: secret)
            configuration.heartbeatInterval = kept
            #expect(configuration.heartbeatInterval == kept, "\(kept)")
        }
    }
}

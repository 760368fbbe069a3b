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
}

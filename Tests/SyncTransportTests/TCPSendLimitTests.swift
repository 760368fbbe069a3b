import Testing
@testable import SyncTransport

/// `send` of a frame the connection could never seal within its limits.
/// Before: `send` returned as if the frame were on its way; the writer then
/// failed to seal it and closed the whole connection, which ended on both
/// ends with "frame of N bytes exceeds the …-byte limit" (as if the peer had
/// sent it), and the frames queued with it were lost. Now `send` throws
/// `.oversizedFrame` at once, sends nothing, and the connection goes on.
@Suite(.timeLimit(.minutes(5))) struct TCPSendLimitTests {
    @Test func aFrameBeyondTheLimitsIsRefusedBySendAndTheConnectionGoesOn() async throws {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let dialed = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let accepted = try await first(of: listener.connections, "the listener's connection")
        let limits = FrameLimits.default
        // Incompressible, and past the wire limit once sealed; compressible, but past the inflated limit.
        let refused = [randomBytes(limits.maxFrameSize, seed: 1), [UInt8](repeating: 0, count: limits.maxInflatedSize + 1)]
        for payload in refused {
            let error = await expectCode(.oversizedFrame) { try await dialed.send(Frame(type: 1, payload: payload)) }
            #expect(error?.message.contains("nothing was sent") == true, "\(String(describing: error))")
        }
        // Past the wire limit as it is, but deflated far below it: it goes.
        let compressible = [UInt8](repeating: 7, count: limits.maxFrameSize + 1)
        try await dialed.send(Frame(type: 2, payload: compressible))
        try await dialed.send(Frame(type: 3, payload: [1, 2, 3]))
        let frames = try await receive(2, from: accepted)
        #expect(frames.map(\.type) == [2, 3])
        #expect(frames.first?.payload == compressible && frames.last?.payload == [1, 2, 3])
        await dialed.close()
        #expect(try await inboundEnd(of: accepted).error == nil, "the connection ended normally, by our close")
        await accepted.close()
        await listener.close()
    }
}

/// Small frame limits (`TCPConfiguration.limits`, here 40 bytes on the wire and
/// 24 inflated, enough for a sealed frame of a few bytes). Before: the handshake's
/// own frames (a 50-byte hello, a 65-byte challenge) were held to them, so the
/// dialer failed with "frame of 50 bytes exceeds the 40-byte limit" before
/// sending anything of the app's, and a listener with such limits refused every
/// hello as the peer's oversized frame. Now the handshake's frames, fixed and
/// small, have their own bound (`EnvelopeDecoderHandler.handshakeFrameLimit`), and the limits hold for the app's frames.
@Suite(.timeLimit(.minutes(5))) struct SmallFrameLimitTests {
    @Test func endsWithSmallLimitsShakeHandsAndKeepTheirLimitsForFrames() async throws {
        let secret = PairingSecret.generate()
        let small: (inout TCPConfiguration) -> Void = { $0.limits = FrameLimits(maxFrameSize: 40, maxInflatedSize: 24) }
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, small))
        let dialed = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret, small))
        let accepted = try await first(of: listener.connections, "the listener's connection")
        try await dialed.send(Frame(type: 1, payload: Array(repeating: 1, count: 24)))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: Array(repeating: 1, count: 24))])
        await expectCode(.oversizedFrame) { try await accepted.send(Frame(type: 2, payload: randomBytes(25, seed: 2))) }
        try await accepted.send(Frame(type: 2, payload: [2]))
        #expect(try await receive(1, from: dialed) == [Frame(type: 2, payload: [2])])
        await dialed.close()
        #expect(try await inboundEnd(of: accepted).error == nil, "the connection ended normally, by our close")
        await accepted.close()
        await listener.close()
    }
}

import Foundation
import NIOCore
import NIOEmbedded
import Testing
@_spi(Benchmarks) @testable import SyncTransport

/// Frame limits near `Int.max` (an app's "no limit"). Before: they were kept,
/// so a length field of 2^31 − 1 passed the check and the 13-byte header
/// added to it overflowed an `Int` of 32 bits (a trap on an arm64_32 watch);
/// on 64 bits a 4 GiB length was waited for. Now every limit is at most
/// `FrameLimits.largestSize`, and such a length is refused.
@Suite(.timeLimit(.minutes(5))) struct FrameLimitBoundTests {
    /// A header announcing `length` payload bytes of type 0x01.
    static func header(length: UInt32, flags: UInt8 = 0) -> [UInt8] {
        FrameEnvelope.magic + [FrameEnvelope.currentVersion, 0x01, flags]
            + [UInt8(length >> 24), UInt8(truncatingIfNeeded: length >> 16), UInt8(truncatingIfNeeded: length >> 8),
               UInt8(truncatingIfNeeded: length)]
            + [0, 0, 0, 0]
    }

    static let hostileLengths: [UInt32] = [UInt32(FrameLimits.largestSize) + 1, UInt32(Int32.max), .max]

    @Test func limitsOfIntMaxAreTakenAsTheLargestSize() throws {
        #expect(FrameLimits.largestSize + FrameEnvelope.headerSize + FrameSealer.tagSize == Int(Int32.max))
        var limits = FrameLimits(maxFrameSize: .max, maxInflatedSize: .max)
        #expect(limits.maxFrameSize == FrameLimits.largestSize && limits.maxInflatedSize == FrameLimits.largestSize)
        limits = .default
        limits.maxFrameSize = .max
        limits.maxInflatedSize = Int(Int32.max)
        #expect(limits.maxFrameSize == FrameLimits.largestSize && limits.maxInflatedSize == FrameLimits.largestSize)
        limits.maxFrameSize = 1000
        #expect(limits.maxFrameSize == 1000, "a smaller limit is kept")
        let json = #"{"maxFrameSize":\#(Int.max),"maxInflatedSize":\#(Int.max),"compressionThreshold":10}"#
        let decoded = try JSONDecoder().decode(FrameLimits.self, from: Data(json.utf8))
        #expect(decoded == FrameLimits(maxFrameSize: FrameLimits.largestSize, maxInflatedSize: FrameLimits.largestSize, compressionThreshold: 10))
        var configuration = TCPConfiguration(secret: .generate())
        configuration.limits.maxFrameSize = .max
        #expect(configuration.limits.maxFrameSize == FrameLimits.largestSize)
    }

    @Test func aHostileLengthIsRefusedByEveryDecoder() throws {
        let limits = FrameLimits(maxFrameSize: .max, maxInflatedSize: .max)
        for length in Self.hostileLengths {
            var decoder = FrameDecoder(limits: limits)
            decoder.append(Self.header(length: length))
            expectCode(.oversizedFrame) { _ = try decoder.next() }
            expectCode(.oversizedFrame) { _ = try FrameCodec(limits: limits).decodeEnvelope(Self.header(length: length)) }
            // The decoder TCP runs, after its handshake (none here).
            let channel = EmbeddedChannel(
                handler: ByteToMessageHandler(EnvelopeDecoderHandler(limits: limits, handshakeFrames: 0, activity: SocketActivity())))
            expectCode(.oversizedFrame) { try channel.writeInbound(ByteBuffer(bytes: Self.header(length: length))) }
            _ = try? channel.finish(acceptAlreadyClosed: true)
        }
        // The largest size itself passes the header check: the payload is waited for.
        var decoder = FrameDecoder(limits: limits)
        decoder.append(Self.header(length: UInt32(FrameLimits.largestSize)))
        #expect(try decoder.next() == nil)
    }

    /// Over TCP: a paired peer announces a frame of 2^31 − 1 bytes to a
    /// listener whose limits are `.max`; the connection ends with
    /// `oversized-frame` as soon as the header is in.
    @Test func aPeersHostileLengthEndsTheConnection() async throws {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret) {
            $0.limits.maxFrameSize = .max
            $0.limits.maxInflatedSize = .max
        })
        let accepted = try await withRawClient(port: listener.port) { session -> any FrameConnection in
            _ = try await session.handshake(secret: secret)
            let accepted = try await first(of: listener.connections, "the listener's connection")
            try await session.send(Self.header(length: UInt32(Int32.max), flags: EnvelopeFlags.encrypted.rawValue))
            let end = try await inboundEnd(of: accepted)
            #expect(end.frames.isEmpty)
            #expect(end.error?.code == .oversizedFrame, "\(String(describing: end.error))")
            return accepted
        }
        await accepted.close()
        await listener.close()
    }
}

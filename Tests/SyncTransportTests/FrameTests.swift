import Testing
@testable import SyncTransport
@Test func frameEnvelopeHeaderSize() { #expect(FrameEnvelope.headerSize == 13) }

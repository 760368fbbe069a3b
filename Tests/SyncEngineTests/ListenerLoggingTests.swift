import Foundation
import Logging
import Synchronization
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

@Suite(.timeLimit(.minutes(5))) struct ListenerLoggingTests {
    /// A dialer of another pairing is turned away: the listener logs it, to
    /// its injected logger, with the dialer's address and the reason.
    @Test func aDialerThatFailsPairingIsLoggedAtTheListenerWithItsAddressAndReason() async throws {
        let (lines, sink) = AsyncStream.makeStream(of: String.self)
        var configuration = TCPConfiguration(secret: .generate())
        configuration.logger = Logger(label: "listener") { _ in StreamLogHandler(sink: sink, includesMetadata: true) }
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        await #expect(throws: TransportError.self) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: .generate()))
        }
        let line = try await first(of: lines, "the listener's log line about the dialer") { $0.contains("rejected") }
        await listener.close()
        #expect(line.hasPrefix("warning rejected the peer during the handshake"), "\(line)")
        #expect(line.contains("peer=tcp:127.0.0.1:"), "\(line)")
        #expect(line.contains("code=authentication-failed"), "\(line)")
        #expect(line.contains("reason=") && line.contains("does not hold"), "\(line)")
        let report = try await first(of: listener.rejectionReports, "the rejection report")
        #expect(report.peer?.hasPrefix("tcp:127.0.0.1:") == true)
    }
}

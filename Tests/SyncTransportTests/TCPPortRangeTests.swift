import Testing
@testable import SyncTransport

/// Ports outside 0...65535, given to the listener or the dialer.
@Suite(.timeLimit(.minutes(5))) struct TCPPortRangeTests {
    let secret = PairingSecret.generate()

    /// Before: `TCPListener.bind(port: 65536)` succeeded and listened on a
    /// random port (the port was cut to 16 bits: 65536 became 0, 70000
    /// became 4464), though `init` promises `.connectFailed` when the address cannot
    /// be bound: an app that mistyped its port listened where no watch dials.
    @Test(arguments: [65536, 65536 * 2])
    func aListenerRefusesAPortOutOfRange(port: Int) async throws {
        let outcome = await Result { try await TCPListener.bind(host: "127.0.0.1", port: port, configuration: testConfiguration(secret)) }
        if case .success(let listener) = outcome {
            await listener.close()
            Issue.record("port \(port) was taken as \(listener.port)")
        }
        let error = try #require(outcome.failure as? TransportError)
        #expect(error.code == .connectFailed)
        #expect(error.message.contains("0...65535"))
    }

    /// Before: a dial to port 65536 went to port 0, and its error named a
    /// refusal there ("127.0.0.1:0: Connection refused") instead of the port's range.
    @Test(arguments: [65536, 65536 * 2])
    func aDialerRefusesAPortOutOfRange(port: Int) async throws {
        let outcome = await Result { try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: testConfiguration(secret)) }
        if case .success(let connection) = outcome { await connection.close() }
        let error = try #require(outcome.failure as? TransportError)
        #expect(error.code == .connectFailed)
        #expect(error.message.contains("0...65535"))
    }
}

private extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }

    var failure: (any Error)? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

import Foundation
@testable import SyncSim
import SyncTransport
import Testing

/// `--listen` / `--connect` take HOST:PORT as people write it, an IPv6
/// address in brackets (`[::1]:7000`) included: the brackets went to the
/// resolver, and the node exited 3 with `UnknownHost … for host [::1]`.
@Suite struct NodeAddressTests {
    @Test func bracketedIPv6AddressesLoseTheirBrackets() throws {
        #expect(NodeCommand.split("[::1]:7000").map { "\($0.host) \($0.port)" } == "::1 7000")
        #expect(NodeCommand.split("[fe80::1%eth0]:0").map { "\($0.host) \($0.port)" } == "fe80::1%eth0 0")
        #expect(NodeCommand.split("127.0.0.1:7000").map { "\($0.host) \($0.port)" } == "127.0.0.1 7000")
        #expect(NodeCommand.split("[]:7000") == nil)
        #expect(NodeCommand.split("[::1]") == nil)
        #expect(NodeCommand.split(":7000") == nil)
    }

    @Test func aListenerBindsOnABracketedLoopback() async throws {
        let (host, port) = try #require(NodeCommand.split("[::1]:0"))
        let listener = try await TCPListener.bind(host: host, port: port, configuration: TCPConfiguration(secrets: [PairingSecret.generate()]))
        #expect(listener.port > 0)
        await listener.close()
    }
}

import Foundation
import SyncTransport
import Testing

/// `rejected` lines are rate limited: each stands for one rejected peer and
/// `suppressed` others. A listening node that quit never printed the count
/// the limit still held back (the listener gives it in a last report when it
/// closes, and the node never closed it): strangers turned away just before
/// `quit` were never reported at all.
@Suite struct NodeQuitRejectionsTests {
    @Test func aQuittingNodeReportsEveryRejectionTheLimitHeldBack() async throws {
        let setup = try await ListeningPhoneNode()
        let phone = setup.phone
        defer { setup.phone.stop() }
        let port = setup.port

        // Strangers of another pairing, more than the 10 reported at once.
        let strangers = 30
        let stranger = TCPConfiguration(secret: PairingSecret.generate())
        for _ in 0..<strangers {
            await #expect(throws: TransportError.self) { _ = try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: stranger) }
        }
        phone.send("quit")
        var reported = 0
        while reported < strangers {
            // The output ends at the node's exit: a count never printed fails the wait at once.
            let line = try await phone.next("the rejections reported (\(reported) of \(strangers) so far)") { $0["event"] as? String == "rejected" }
            reported += 1 + (line["suppressed"] as? Int ?? 0)
        }
        #expect(reported == strangers)
        #expect(try await exitStatus(of: phone.process, "the phone node to quit") == 0)
    }
}

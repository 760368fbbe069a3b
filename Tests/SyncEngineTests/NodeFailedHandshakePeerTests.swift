import Foundation
import SyncTransport
import Testing

/// A dialing node's `error` line for a failed handshake carried no `peer`,
/// while every other line about a peer names it (the listener's `rejected`
/// line names the dialer `tcp:HOST:PORT`). It now names the phone it dialed
/// the same way, beside its `event` and `error` fields. A refused pairing is
/// dialed again only after the longest wait: the line says so.
@Suite struct NodeFailedHandshakePeerTests {
    @Test func aFailedHandshakeNamesThePeerItDialed() async throws {
        let setup = try await ListeningPhoneNode()
        defer { setup.phone.stop() }
        let otherSecret = setup.folder.file("other.secret")
        try PairingSecret.generate().write(to: otherSecret)
        let watch = try NodeProcess(["--role", "watch", "--db", setup.folder.file("watch.sqlite"), "--keys", setup.keys,
                                     "--secret-file", otherSecret, "--connect", "127.0.0.1:\(setup.port)"])
        defer { watch.stop() }

        let failed = try await watch.next("the watch's failed dial") { $0["event"] as? String == "error" }
        #expect(failed["peer"] as? String == "tcp:127.0.0.1:\(setup.port)", "\(failed)")
        let error = try #require(failed["error"] as? String)
        #expect(error.hasPrefix("authentication-failed: "), "\(error)")
        #expect(error.contains("dialing it again after the longest wait"), "\(error)")
        #expect(Set(failed.keys) == ["event", "error", "peer"], "\(failed)")

        // The listener's line for the same handshake, as it was: the dialer's address.
        let rejected = try await setup.phone.next("the phone's rejection") { $0["event"] as? String == "rejected" }
        #expect((rejected["peer"] as? String)?.hasPrefix("tcp:127.0.0.1:") == true, "\(rejected)")

        // The node stays up for its commands while it waits to dial again.
        watch.send("status")
        #expect(try await watch.reply("status")["ok"] as? Bool == true)
        watch.send("quit")
        #expect(try await exitStatus(of: watch.process, "the watch node to quit") == 0)
    }
}

import Foundation
import SyncTransport
import Testing

/// A `syncsim node` that quits (`quit`, SIGTERM, SIGINT) prints what its
/// sessions did as they ended: the `disconnected` line of each. The lines
/// were forwarded by a task of the group that quitting cancels, at the same
/// time as the sessions: the node exited 0 without saying that its session
/// ended, and a script waiting for it waited in vain.
@Suite struct NodeQuitEventsTests {
    @Test(arguments: ["quit", "SIGTERM", "SIGINT"])
    func aQuittingNodePrintsTheEndOfItsSession(how: String) async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(NodeMultiPairingTests.keys.utf8).write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)

        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)
        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await watch.next("the watch's session") { $0["event"] as? String == "connected" }
        try await phone.next("the phone's session") { $0["event"] as? String == "connected" }

        switch how {
        case "SIGTERM": kill(watch.process.processIdentifier, SIGTERM)
        case "SIGINT": kill(watch.process.processIdentifier, SIGINT)
        default: watch.send("quit")
        }
        // Its output ends at its exit: a line not printed by then fails the wait at once.
        let ended = try await watch.next("the quitting watch's disconnected line (\(how))") { $0["event"] as? String == "disconnected" }
        // This side stopped it; the peer did not close it.
        #expect((ended["reason"] as? String)?.hasPrefix("stopped on this side") == true, "\(ended)")
        #expect(try await exitStatus(of: watch.process, "the watch node to stop (\(how))") == 0)
        try await phone.next("the phone's disconnected line") { $0["event"] as? String == "disconnected" }

        // The phone quitting with a watch connected says so too.
        let second = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                      "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { second.stop() }
        try await phone.next("the phone's second session") { $0["event"] as? String == "connected" }
        phone.send("quit")
        let phoneEnded = try await phone.next("the quitting phone's disconnected line") { $0["event"] as? String == "disconnected" }
        #expect((phoneEnded["reason"] as? String)?.hasPrefix("stopped on this side") == true, "\(phoneEnded)")
        #expect(try await exitStatus(of: phone.process, "the phone node to quit") == 0)
        second.send("quit")
        try await exitStatus(of: second.process, "the second watch to quit")
    }
}

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
        let setup = try await ListeningPhoneNode()
        let phone = setup.phone
        defer { setup.phone.stop() }
        let watch = try setup.watch()
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
        let second = try setup.watch()
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

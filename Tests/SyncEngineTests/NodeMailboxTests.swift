import Foundation
import SyncEngine
import SyncTransport
@_spi(Testing) @testable import SyncSim
import Testing

/// `syncsim node --mailbox DIR`: two node processes sharing a mailbox
/// directory, one of them down while the other writes.
@Suite(.timeLimit(.minutes(5))) struct NodeMailboxTests {
    static let keys = """
        {"keys":[
          {"name":"health:steps","availability":"all","policy":"automaticSmall","security":"none"},
          {"name":"phone:token","availability":"phoneOnly","policy":"automaticSmall","security":"none"}
        ]}
        """

    struct Setup {
        let folder = TempFolder()
        let keys: String
        let secret: String
        var mailbox: String { folder.file("mailbox") }

        init() throws {
            keys = folder.file("keys.json")
            try Data(NodeMailboxTests.keys.utf8).write(to: URL(fileURLWithPath: keys))
            secret = folder.file("pair.secret")
            try PairingSecret.generate().write(to: secret)
        }

        /// A second watch's pairing: its secret file (made on first use) and its mailbox directory.
        func secondPairing() throws -> (secret: String, mailbox: String) {
            let secret = folder.file("pair-2.secret")
            if !FileManager.default.fileExists(atPath: secret) { try PairingSecret.generate().write(to: secret) }
            return (secret, folder.file("mailbox-2"))
        }

        /// A phone node of both pairings, with a mailbox for each.
        func phoneOfTwoWatches(_ extra: [String] = []) throws -> NodeProcess {
            let (secondSecret, secondMailbox) = try secondPairing()
            return try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys, "--secret-file", secret,
                                    "--secret-file", secondSecret, "--mailbox", mailbox, "--mailbox", secondMailbox] + extra)
        }

        func node(_ role: String, _ extra: [String] = []) throws -> NodeProcess {
            try NodeProcess(["--role", role, "--db", folder.file("\(role).sqlite"), "--keys", keys, "--secret-file", secret,
                             "--mailbox", mailbox] + extra)
        }
    }

    /// The reply to the command just sent and the first line matching `event`, in whichever order the node prints them.
    func replyAndEvent(_ node: NodeProcess, _ what: String,
                       event: @escaping @Sendable ([String: Any]) -> Bool) async throws -> ([String: Any], [String: Any]) {
        var reply: [String: Any]?
        var seen: [String: Any]?
        while reply == nil || seen == nil {
            let line = try await node.next(what) { $0["ok"] != nil || event($0) }
            if line["ok"] != nil { reply = line } else { seen = line }
        }
        return (reply!, seen!)
    }

    func quit(_ node: NodeProcess, _ what: String) async throws {
        node.send("quit")
        #expect(try await exitStatus(of: node.process, what) == 0)
    }

    /// A node whose stdout is closed (whoever read its lines is gone) ends as
    /// on `quit`, with one line on stderr and exit code 3, its write kept.
    /// Before, the write of its reply trapped (or SIGPIPE killed it).
    @Test func aNodeWhoseOutputIsClosedEndsAsOnQuitAndKeepsItsWrites() async throws {
        let setup = try Setup()
        let process = Process()
        let (input, output, errors) = (Pipe(), Pipe(), Pipe())
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["node", "--role", "phone", "--db", setup.folder.file("phone.sqlite"), "--keys", setup.keys,
                             "--secret-file", setup.secret, "--mailbox", setup.mailbox]
        (process.standardInput, process.standardOutput, process.standardError) = (input, output, errors)
        let errorLines = lines(of: errors)
        try process.run()
        try output.fileHandleForReading.close()
        try input.fileHandleForWriting.write(contentsOf: Data("put health:steps 41\n".utf8))
        #expect(try await exitStatus(of: process, "the node to end once its reply cannot be written") == Simulation.Exit.runtimeFailure)
        #expect(process.terminationReason == .exit)
        let line = try await first(of: errorLines, "the node's error line") { $0.hasPrefix("syncsim node: error:") }
        #expect(line.contains("stdout could not be written"), "\(line)")
        let registry = try KeyRegistry.load(jsonFile: setup.keys)
        let store = try SyncStore(path: setup.folder.file("phone.sqlite"), role: .phone, registry: registry)
        defer { store.close() }
        #expect(try store.entryInfo(forKey: "health:steps") != nil)
    }

    /// `status` with the mailbox directory gone: everything else, and the
    /// mailbox's error in its place (the whole command failed before).
    @Test func statusReportsAMailboxItCannotReadInsteadOfFailing() async throws {
        let setup = try Setup()
        let phone = try setup.node("phone")
        defer { phone.stop() }
        phone.send("status")
        #expect(try await phone.reply("status")["mailbox"] is [String: Any])
        try FileManager.default.removeItem(atPath: setup.mailbox)
        phone.send("status")
        let status = try await phone.reply("status with the mailbox gone")
        #expect(status["ok"] as? Bool == true)
        #expect(status["role"] as? String == "phone")
        let mailbox = try #require(status["mailbox"] as? [String: Any])
        #expect((mailbox["error"] as? String)?.contains("mailbox-io") == true, "\(mailbox)")
        try await quit(phone, "the phone node to quit")
    }

    /// Two nodes whose keys files declare one key differently (one app updated
    /// first), with only the mailbox between them: after the first refusal and
    /// the exchange of declarations, the key declared alike flows both ways and
    /// the other never crosses.
    @Test func nodesWithRegistriesThatDifferSyncTheKeysDeclaredAlike() async throws {
        let setup = try Setup()
        // The same keys file but for the policy of health:steps.
        func keysFile(_ role: String, stepsPolicy: String) throws -> String {
            let path = setup.folder.file("\(role)-keys.json")
            try Data("""
                {"keys":[
                  {"name":"health:steps","availability":"all","policy":"\(stepsPolicy)","security":"none"},
                  {"name":"phone:token","availability":"phoneOnly","policy":"automaticSmall","security":"none"},
                  {"name":"health:goal","availability":"all","policy":"automaticSmall","security":"none"}
                ]}
                """.utf8).write(to: URL(fileURLWithPath: path))
            return path
        }
        let phoneKeys = try keysFile("phone", stepsPolicy: "automaticSmall")
        let watchKeys = try keysFile("watch", stepsPolicy: "manual")
        func node(_ role: String, keys: String) throws -> NodeProcess {
            try NodeProcess(["--role", role, "--db", setup.folder.file("\(role).sqlite"), "--keys", keys, "--secret-file", setup.secret,
                             "--mailbox", setup.mailbox])
        }
        let phone = try node("phone", keys: phoneKeys)
        defer { phone.stop() }
        let watch = try node("watch", keys: watchKeys)
        defer { watch.stop() }
        phone.send("put health:steps 41")
        #expect(try await phone.reply("put health:steps")["ok"] as? Bool == true)
        phone.send("put health:goal 10000")
        #expect(try await phone.reply("put health:goal")["ok"] as? Bool == true)

        let mismatch = try await watch.next("the watch's key-mismatch event") { $0["event"] as? String == "key-mismatch" }
        #expect(mismatch["keys"] as? [String] == ["health:steps"])
        try await watch.next("health:goal on the watch") { $0["event"] as? String == "change" && $0["key"] as? String == "health:goal" }
        watch.send("get health:goal")
        #expect(try await watch.reply("get health:goal")["value"] as? Int == 10000)
        watch.send("get health:steps")
        #expect(try await watch.reply("get health:steps")["present"] as? Bool == false)

        watch.send("put health:goal 12000")
        #expect(try await watch.reply("put health:goal on the watch")["ok"] as? Bool == true)
        try await phone.next("health:goal from the watch") {
            $0["event"] as? String == "change" && $0["key"] as? String == "health:goal" && $0["origin"] as? String == "remote"
        }
        phone.send("get health:goal")
        #expect(try await phone.reply("get health:goal on the phone")["value"] as? Int == 12000)
        try await quit(phone, "the phone node to quit")
        try await quit(watch, "the watch node to quit")
    }

    @Test func changesWrittenWhileTheOtherNodeIsDownArriveThroughTheMailbox() async throws {
        let setup = try Setup()
        // Only the phone runs: it writes, the change waits in the mailbox.
        let phone = try setup.node("phone")
        defer { phone.stop() }
        phone.send("put phone:token \"never on the watch\"")
        #expect(try await phone.reply("put phone:token")["ok"] as? Bool == true)
        phone.send("put health:steps 41")
        // The reply and the queued round's event, in whichever order they come.
        let (put, posted) = try await replyAndEvent(phone, "put health:steps and its queued round") {
            $0["event"] as? String == "queued" && ($0["posted"] as? Int ?? 0) > 0
        }
        #expect(put["ok"] as? Bool == true)
        #expect(posted["read"] as? Int == 0)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: setup.mailbox + "/phone-to-watch")) ?? []).contains { $0.hasSuffix(".msg") })
        phone.send("status")
        let before = try await phone.reply("status")
        #expect((before["pending"] as? [String: Any])?["automatic"] as? Int == 1)  // the watch was never met: everything is pending
        #expect((before["mailbox"] as? [String: Any])?["outgoing"] as? Int == 1)
        #expect(before["reachable"] as? Bool == false)
        // No live session can come to a mailbox-only node: wait-idle says so at once (it waited out its time before).
        phone.send("wait-idle 60")
        let waited = try await phone.reply("wait-idle on a mailbox-only node")
        #expect(waited["ok"] as? Bool == false && waited["code"] as? String == "not-connected", "\(waited)")
        try await quit(phone, "the phone node to quit")

        // The watch starts while the phone is down: the change arrives; the watch writes back.
        let watch = try setup.node("watch")
        defer { watch.stop() }
        try await watch.next("health:steps to change on the watch") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        watch.send("get health:steps")
        #expect(try await watch.reply("get health:steps")["value"] as? Int == 41)
        watch.send("get phone:token")
        #expect(try await watch.reply("get phone:token")["present"] as? Bool == false)
        watch.send("put health:steps 42")
        #expect(try await watch.reply("put health:steps on the watch")["ok"] as? Bool == true)
        // Quitting right away: the node's last queued round posts the change (and the acknowledgement).
        try await quit(watch, "the watch node to quit")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: setup.mailbox + "/watch-to-phone")) ?? []).filter { $0.hasSuffix(".msg") }.count >= 2)

        // The phone comes back: the watch's change and its acknowledgement arrive; nothing is pending any more.
        let again = try setup.node("phone")
        defer { again.stop() }
        try await again.next("health:steps to change on the phone") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        again.send("get health:steps")
        #expect(try await again.reply("get health:steps")["value"] as? Int == 42)
        again.send("status")
        let after = try await again.reply("status")
        #expect((after["pending"] as? [String: Any])?["automatic"] as? Int == 0)
        #expect((after["mailbox"] as? [String: Any])?["refused"] as? Int == 0)
        try await quit(again, "the restarted phone node to quit")
    }

    /// A phone with two watches, one mailbox per pairing and no TCP: what
    /// the phone writes reaches both; what one watch writes reaches the phone
    /// and, through the phone, the other watch. `status` lists each mailbox.
    @Test func aPhoneWithTwoWatchesQueuesForEachThroughItsOwnMailbox() async throws {
        let setup = try Setup()
        let (secondSecret, secondMailbox) = try setup.secondPairing()
        let phone = try setup.phoneOfTwoWatches()
        defer { phone.stop() }
        let watch = try setup.node("watch")
        defer { watch.stop() }
        let watch2 = try NodeProcess(["--role", "watch", "--db", setup.folder.file("watch-2.sqlite"), "--keys", setup.keys,
                                      "--secret-file", secondSecret, "--mailbox", secondMailbox])
        defer { watch2.stop() }

        phone.send("put health:steps 5")
        #expect(try await phone.reply("put health:steps")["ok"] as? Bool == true)
        for (node, name) in [(watch, "the first watch"), (watch2, "the second watch")] {
            try await node.next("steps 5 on \(name)") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        }
        watch2.send("put health:steps 8")
        #expect(try await watch2.reply("put health:steps on the second watch")["ok"] as? Bool == true)
        try await watch.next("the second watch's steps on the first, through the phone") {
            $0["event"] as? String == "change" && $0["key"] as? String == "health:steps"
        }
        watch.send("get health:steps")
        #expect(try await watch.reply("get health:steps on the first watch")["value"] as? Int == 8)

        phone.send("status")
        let status = try await phone.reply("the phone's status")
        let mailboxes = try #require(status["mailboxes"] as? [[String: Any]], "\(status)")
        #expect(mailboxes.map { $0["directory"] as? String } == [setup.mailbox, secondMailbox])
        #expect(mailboxes.allSatisfy { $0["refused"] as? Int == 0 })
        #expect(status["mailbox"] == nil)
        try await quit(watch, "the first watch node to quit")
        try await quit(watch2, "the second watch node to quit")
        try await quit(phone, "the phone node to quit")
    }

    /// A listening phone with two watches' mailboxes: while the first watch
    /// is live, the second, never met and only reading its mailbox, still
    /// gets the phone's writes (the phone posted nothing for it while any
    /// watch was live).
    @Test func aPhoneLiveWithOneWatchQueuesForTheOtherThatItNeverMet() async throws {
        let setup = try Setup()
        let (secondSecret, secondMailbox) = try setup.secondPairing()
        let phone = try setup.phoneOfTwoWatches(["--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)
        let watch = try setup.node("watch", ["--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await watch.next("the first watch to connect") { $0["event"] as? String == "connected" }

        phone.send("put health:steps 3")
        #expect(try await phone.reply("put health:steps")["ok"] as? Bool == true)
        try await watch.next("steps over the live link") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        let watch2 = try NodeProcess(["--role", "watch", "--db", setup.folder.file("watch-2.sqlite"), "--keys", setup.keys,
                                      "--secret-file", secondSecret, "--mailbox", secondMailbox])
        defer { watch2.stop() }
        try await watch2.next("steps through the second watch's mailbox") {
            $0["event"] as? String == "change" && $0["key"] as? String == "health:steps"
        }
        watch2.send("get health:steps")
        #expect(try await watch2.reply("get health:steps on the second watch")["value"] as? Int == 3)
        try await quit(watch2, "the second watch node to quit")
        try await quit(watch, "the first watch node to quit")
        try await quit(phone, "the phone node to quit")
    }

    @Test func aListeningPhoneQueuesWhileItsWatchIsDown() async throws {
        let setup = try Setup()
        let phone = try setup.node("phone", ["--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)
        let watch = try setup.node("watch", ["--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await watch.next("the watch to connect") { $0["event"] as? String == "connected" }
        phone.send("put health:steps 1")
        #expect(try await phone.reply("put health:steps")["ok"] as? Bool == true)
        try await watch.next("steps over the live link") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        watch.send("status")
        #expect(try await watch.reply("status")["reachable"] as? Bool == true)

        // The watch dies; the phone goes on writing, its changes are queued.
        watch.stop()
        try await phone.next("the phone to see the watch go") { $0["event"] as? String == "disconnected" }
        phone.send("put health:steps 2")
        #expect(try await phone.reply("put health:steps 2")["ok"] as? Bool == true)

        // The watch comes back without TCP: the mailbox brings the change.
        let offline = try setup.node("watch")
        defer { offline.stop() }
        try await offline.next("steps through the mailbox") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        offline.send("get health:steps")
        #expect(try await offline.reply("get health:steps")["value"] as? Int == 2)
        offline.send("status")
        let status = try await offline.reply("status")
        #expect(status["reachable"] as? Bool == false)
        // The phone reads the acknowledgement: nothing pending for the watch.
        try await phone.next("the phone to read the watch's acknowledgement") { $0["event"] as? String == "queued" && $0["acknowledged"] as? Bool == true }
        phone.send("status")
        #expect((try await phone.reply("status")["pending"] as? [String: Any])?["automatic"] as? Int == 0)
        try await quit(offline, "the watch node to quit")
        try await quit(phone, "the phone node to quit")
    }
}

/// `syncsim node --mailbox DIR`'s arguments.
@Suite struct NodeMailboxArgumentTests {
    let base = ["--role", "watch", "--db", "w.sqlite", "--keys", "k.json", "--secret-file", "a"]

    @Test func aMailboxGoesWithOrWithoutTCPAndServesOnePairing() throws {
        #expect(try NodeCommand.parse(base + ["--mailbox", "box"]).mailbox == ["box"])
        _ = try NodeCommand.parse(base + ["--mailbox", "box", "--connect", "127.0.0.1:7000"])
        _ = try NodeCommand.parse(["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "a",
                                   "--mailbox", "box", "--listen", "127.0.0.1:0"])
        // Neither TCP nor a mailbox: nothing to sync over.
        #expect(throws: (any Error).self) { _ = try NodeCommand.parse(base) }
        do {
            _ = try NodeCommand.parse(["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "a", "--secret-file", "b",
                                       "--mailbox", "box", "--listen", "127.0.0.1:0"])
            Issue.record("two pairings with one mailbox were accepted")
        } catch {
            #expect(NodeCommand.message(for: error).contains("--mailbox serves one pairing"), "\(NodeCommand.message(for: error))")
        }
        // A phone with two watches: one mailbox per pairing, in the order of the secret files, each its own directory.
        let twoPairings = ["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "a", "--secret-file", "b"]
        #expect(try NodeCommand.parse(twoPairings + ["--mailbox", "box-a", "--mailbox", "box-b"]).mailbox == ["box-a", "box-b"])
        do {
            _ = try NodeCommand.parse(twoPairings + ["--mailbox", "box", "--mailbox", "./box"])
            Issue.record("one mailbox directory for two pairings was accepted")
        } catch {
            #expect(NodeCommand.message(for: error).contains("is given twice"), "\(NodeCommand.message(for: error))")
        }
    }

    /// One directory spelled through a symbolic link passed as two: both
    /// pairings' mailboxes then shared one spool per direction, and each
    /// refused (set aside) the other watch's messages as another pairing's.
    @Test func oneMailboxDirectoryThroughASymbolicLinkIsGivenTwice() throws {
        let folder = TempFolder()
        try FileManager.default.createDirectory(atPath: folder.file("box"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: folder.file("link"), withDestinationPath: folder.file("box"))
        let twoPairings = ["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "a", "--secret-file", "b"]
        do {
            _ = try NodeCommand.parse(twoPairings + ["--mailbox", folder.file("box"), "--mailbox", folder.file("link")])
            Issue.record("one mailbox directory, spelled through a link, for two pairings was accepted")
        } catch {
            #expect(NodeCommand.message(for: error).contains("is given twice"), "\(NodeCommand.message(for: error))")
        }
    }
}

import Foundation
import Synchronization
import SyncTransport
import Testing

/// `syncsim node`'s `request-manual`: the watch asks the phone for its manual
/// changes, both print an event, and the change arrives.
@Suite(.timeLimit(.minutes(5))) struct NodeManualRequestTests {
    @Test func theWatchNodeAsksThePhoneNodeForItsManualChanges() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data("""
            {"keys":[{"name":"profile:name","availability":"all","policy":"manual","security":"none"}]}
            """.utf8).write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)
        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let port = try #require(try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }["port"] as? Int)
        phone.send("put profile:name \"Ada\"")
        #expect(try await phone.reply("put profile:name")["ok"] as? Bool == true)
        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await watch.next("the watch to connect") { $0["event"] as? String == "connected" }
        watch.send("wait-idle 20")
        #expect(try await watch.reply("wait-idle")["ok"] as? Bool == true)
        watch.send("get profile:name")
        #expect(try await watch.reply("get profile:name")["present"] as? Bool == false, "not before it is asked for")

        watch.send("request-manual")
        #expect(try await watch.reply("request-manual")["asked"] as? Int == 1)
        // The answer and the change may be printed before the reply to
        // request-manual, and in either order: wait for both.
        let watchSaw = Mutex<(answeredWithOne: Bool?, changed: Bool)>((nil, false))
        try await watch.next("the watch's manual-request-answered event and profile:name's change") { event in
            watchSaw.withLock { seen in
                if event["event"] as? String == "manual-request-answered" {
                    seen.answeredWithOne = event["accepted"] as? Bool == true && event["released"] as? Int == 1
                }
                if event["event"] as? String == "change" && event["key"] as? String == "profile:name" { seen.changed = true }
                return seen.answeredWithOne != nil && seen.changed
            }
        }
        #expect(watchSaw.withLock { $0.answeredWithOne } == true)
        let received = try await phone.next("the phone's manual-request-received event") { $0["event"] as? String == "manual-request-received" }
        #expect(received["accepted"] as? Bool == true && received["released"] as? Int == 1)
        watch.send("get profile:name")
        #expect(try await watch.reply("get profile:name")["value"] as? String == "Ada")
        phone.send("quit")
        watch.send("quit")
        try await exitStatus(of: phone.process, "the phone node to quit")
        try await exitStatus(of: watch.process, "the watch node to quit")
    }
}

import Foundation
import SyncTransport
import Testing

/// A `syncsim node` child process, driven through its stdin/stdout JSON lines.
final class NodeProcess: Sendable {
    let process = Process()
    let input = Pipe()
    let output = Pipe()
    let lines: AsyncStream<String>

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["node"] + arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        lines = SyncEngineTests.lines(of: output)
        try process.run()
    }

    func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}

func json(_ line: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
}

/// The next line of `lines` that satisfies `match`.
func next(_ iterator: inout AsyncStream<String>.Iterator, where match: ([String: Any]) -> Bool) async -> [String: Any]? {
    while let line = await iterator.next() {
        let object = json(line)
        // NODE_TRACE=1 swift test … prints every line the child writes.
        if ProcessInfo.processInfo.environment["NODE_TRACE"] != nil { FileHandle.standardError.write(Data("child: \(line)\n".utf8)) }
        if match(object) { return object }
    }
    return nil
}

@Suite struct NodeProcessTests {
    @Test func twoNodeProcessesSyncOverLoopback() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data("""
            {"keys":[
              {"name":"health:steps","availability":"all","policy":"automaticSmall","security":"none"},
              {"name":"profile:name","availability":"all","policy":"manual","security":"encrypted"},
              {"name":"phone:token","availability":"phoneOnly","policy":"automaticSmall","security":"none"}
            ]}
            """.utf8).write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)

        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        var phoneOut = phone.lines.makeAsyncIterator()
        let listening = await next(&phoneOut) { $0["event"] as? String == "listening" }
        let port = try #require(listening?["port"] as? Int)
        #expect(port > 0)

        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        var watchOut = watch.lines.makeAsyncIterator()

        phone.send("put health:steps 1234")
        #expect(await next(&phoneOut) { $0["ok"] != nil }?["ok"] as? Bool == true)
        phone.send("put phone:token \"abc\"")
        #expect(await next(&phoneOut) { $0["ok"] != nil }?["ok"] as? Bool == true)
        phone.send("put profile:name \"Ada\"")
        #expect(await next(&phoneOut) { $0["ok"] != nil }?["ok"] as? Bool == true)
        _ = await next(&watchOut) { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        watch.send("get health:steps")
        let got = await next(&watchOut) { $0["ok"] != nil }
        #expect(got?["value"] as? Int == 1234)

        phone.send("sync")
        #expect(await next(&phoneOut) { $0["ok"] != nil }?["queued"] as? Int == 1)
        _ = await next(&watchOut) { $0["event"] as? String == "change" && $0["key"] as? String == "profile:name" }
        watch.send("get profile:name")
        #expect(await next(&watchOut) { $0["ok"] != nil }?["value"] as? String == "Ada")
        watch.send("get phone:token")
        let token = await next(&watchOut) { $0["ok"] != nil }
        #expect(token?["present"] as? Bool == false)
        watch.send("put phone:token \"x\"")
        let refused = await next(&watchOut) { $0["ok"] != nil }
        #expect(refused?["ok"] as? Bool == false)
        #expect(refused?["code"] as? String == "write-not-allowed")
        watch.send("bogus")
        #expect(await next(&watchOut) { $0["ok"] != nil }?["ok"] as? Bool == false)
        phone.send("wait-idle 20")
        #expect(await next(&phoneOut) { $0["ok"] != nil }?["ok"] as? Bool == true)
        phone.send("status")
        let status = await next(&phoneOut) { $0["ok"] != nil }
        #expect(status?["connected"] as? Bool == true)
        #expect(status?["sent"] as? Int == 2)
        phone.send("quit")
        watch.send("quit")
        phone.process.waitUntilExit()
        watch.process.waitUntilExit()
        #expect(phone.process.terminationStatus == 0)
    }
}

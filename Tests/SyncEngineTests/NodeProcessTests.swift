import Foundation
import Synchronization
import SyncTransport
import Testing

/// A `syncsim node` child process, driven through its stdin/stdout JSON lines.
final class NodeProcess: Sendable {
    let process = Process()
    let input = Pipe()
    let output = Pipe()
    let lines: AsyncStream<String>

    /// `syncsim node` with `arguments`, or (`executable` given) any program.
    init(_ arguments: [String], executable: String? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable ?? syncsimBinary())
        process.arguments = executable == nil ? ["node"] + arguments : arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        lines = SyncEngineTests.lines(of: output)
        try process.run()
    }

    func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    /// Writes `bytes` to the child's stdin as they are (text that is not UTF-8, say).
    func send(bytes: [UInt8]) {
        input.fileHandleForWriting.write(Data(bytes))
    }

    /// Kills the child if it still runs (SIGKILL: a stuck child cannot ignore it) and waits, up to 10 s, for it to be reaped.
    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        waitForExit(process, within: .seconds(10))
    }

    /// Event lines a `reply` passed over, oldest first: the next `next` looks
    /// at them before newer lines (an event a command caused may be printed
    /// before the command's own reply).
    private let passedOver = Mutex<[String]>([])
    /// The last lines the child printed, for a failed wait's message.
    private let transcript = Mutex<[String]>([])

    /// The next line the child prints that satisfies `match`, parsed; throws
    /// `WaitFailed` naming `what` (and the child's last lines) if none comes
    /// within `limit` or the child's output ends.
    @discardableResult
    func next(_ what: String, within limit: Duration = waitLimit, sourceLocation: SourceLocation = #_sourceLocation,
              where match: @escaping @Sendable ([String: Any]) -> Bool) async throws -> [String: Any] {
        let earlier = passedOver.withLock { lines -> [String: Any]? in
            guard let index = lines.firstIndex(where: { match(json($0)) }) else {
                lines.removeAll()
                return nil
            }
            defer { lines.removeSubrange(...index) }
            return json(lines[index])
        }
        if let earlier { return earlier }
        return json(try await line(what, within: limit, sourceLocation: sourceLocation) { match(json($0)) })
    }

    /// The child's answer to the command just sent (the next line with an
    /// `ok` field). Event lines before it stay for `next`.
    func reply(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [String: Any] {
        json(try await line("the reply to \(what)", within: waitLimit, sourceLocation: sourceLocation) { line in
            if json(line)["ok"] != nil { return true }
            self.passedOver.withLock { $0.append(line) }
            return false
        })
    }

    private func line(_ what: String, within limit: Duration, sourceLocation: SourceLocation,
                      where match: @escaping @Sendable (String) -> Bool) async throws -> String {
        do {
            return try await first(of: lines, what, within: limit, sourceLocation: sourceLocation) { line in
                // NODE_TRACE=1 swift test … prints every line the child writes.
                if ProcessInfo.processInfo.environment["NODE_TRACE"] != nil { FileHandle.standardError.write(Data("child: \(line)\n".utf8)) }
                self.transcript.withLock { lines in
                    lines.append(line)
                    if lines.count > 40 { lines.removeFirst(lines.count - 40) }
                }
                return match(line)
            }
        } catch let failure as WaitFailed {
            let last = transcript.withLock { $0 }
            throw WaitFailed(description: failure.description + "; the child's last \(last.count) lines:\n" + last.joined(separator: "\n"))
        }
    }
}

func json(_ line: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
}

/// `put health:steps <value>` on `phone`; waits for the change on `watch`
/// (`what` names the wait) and reads the value back there.
func expectSteps(_ value: Int, from phone: NodeProcess, toReach watch: NodeProcess, _ what: String,
                 sourceLocation: SourceLocation = #_sourceLocation) async throws {
    phone.send("put health:steps \(value)")
    #expect(try await phone.reply("put health:steps", sourceLocation: sourceLocation)["ok"] as? Bool == true, sourceLocation: sourceLocation)
    try await watch.next(what, sourceLocation: sourceLocation) {
        $0["event"] as? String == "change" && $0["key"] as? String == "health:steps"
    }
    watch.send("get health:steps")
    #expect(try await watch.reply("get health:steps", sourceLocation: sourceLocation)["value"] as? Int == value, sourceLocation: sourceLocation)
}

/// Sends `quit` to both nodes and waits for them to exit; the phone must exit with 0.
func quitBoth(phone: NodeProcess, watch: NodeProcess, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    phone.send("quit")
    watch.send("quit")
    #expect(try await exitStatus(of: phone.process, "the phone node to quit", sourceLocation: sourceLocation) == 0, sourceLocation: sourceLocation)
    try await exitStatus(of: watch.process, "the watch node to quit", sourceLocation: sourceLocation)
}

@Suite struct NodeProcessTests {
    /// A node may print the events a command caused before the command's own
    /// reply (the request-manual answer did on a busy CI run): `reply` must
    /// leave them for `next`, which once dropped them and waited in vain.
    @Test func aReplyLeavesTheEventsPrintedBeforeItForNext() async throws {
        let child = try NodeProcess(["-c", #"echo '{"event":"change","key":"a"}'; echo '{"event":"idle"}'; echo '{"ok":true}'; echo '{"event":"change","key":"b"}'"#],
                                    executable: "/bin/sh")
        defer { child.stop() }
        #expect(try await child.reply("the command")["ok"] as? Bool == true)
        #expect(try await child.next("a's change") { $0["key"] as? String == "a" }["event"] as? String == "change")
        #expect(try await child.next("b's change") { $0["key"] as? String == "b" }["event"] as? String == "change")
        await #expect(throws: WaitFailed.self) { try await child.next("an idle event printed before a's change", within: .seconds(2)) { $0["event"] as? String == "idle" } }
    }

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
        let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)
        #expect(port > 0)

        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }

        phone.send("put health:steps 1234")
        #expect(try await phone.reply("put health:steps")["ok"] as? Bool == true)
        phone.send("put phone:token \"abc\"")
        #expect(try await phone.reply("put phone:token")["ok"] as? Bool == true)
        phone.send("put profile:name \"Ada\"")
        #expect(try await phone.reply("put profile:name")["ok"] as? Bool == true)
        try await watch.next("health:steps to change on the watch") { $0["event"] as? String == "change" && $0["key"] as? String == "health:steps" }
        watch.send("get health:steps")
        #expect(try await watch.reply("get health:steps")["value"] as? Int == 1234)

        phone.send("sync")
        #expect(try await phone.reply("sync")["queued"] as? Int == 1)
        try await watch.next("profile:name to change on the watch") { $0["event"] as? String == "change" && $0["key"] as? String == "profile:name" }
        watch.send("get profile:name")
        #expect(try await watch.reply("get profile:name")["value"] as? String == "Ada")
        watch.send("get phone:token")
        #expect(try await watch.reply("get phone:token")["present"] as? Bool == false)
        watch.send("put phone:token \"x\"")
        let refused = try await watch.reply("put phone:token on the watch")
        #expect(refused["ok"] as? Bool == false)
        #expect(refused["code"] as? String == "write-not-allowed")
        watch.send("bogus")
        #expect(try await watch.reply("bogus")["ok"] as? Bool == false)
        phone.send("wait-idle 20")
        #expect(try await phone.reply("wait-idle")["ok"] as? Bool == true)
        phone.send("status")
        let status = try await phone.reply("status")
        #expect(status["connected"] as? Bool == true)
        #expect(status["sent"] as? Int == 2)
        phone.send("quit")
        watch.send("quit")
        #expect(try await exitStatus(of: phone.process, "the phone node to quit") == 0)
        try await exitStatus(of: watch.process, "the watch node to quit")
    }
}

/// `syncsim node` for a phone with several watches: `--secret-file` once per
/// watch on the listening phone, exactly once on a watch.
@Suite struct NodeMultiPairingTests {
    static let keys = """
        {"keys":[{"name":"health:steps","availability":"all","policy":"automaticSmall","security":"none"}]}
        """

    @Test func aWatchOfThePhonesSecondPairingSyncs() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(Self.keys.utf8).write(to: URL(fileURLWithPath: keys))
        let watch1Secret = folder.file("watch1.secret")
        let watch2Secret = folder.file("watch2.secret")
        try PairingSecret.generate().write(to: watch1Secret)
        try PairingSecret.generate().write(to: watch2Secret)

        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", watch1Secret, "--secret-file", watch2Secret, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)
        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch2.sqlite"), "--keys", keys,
                                     "--secret-file", watch2Secret, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await expectSteps(77, from: phone, toReach: watch, "health:steps to change on the second watch")
        try await quitBoth(phone: phone, watch: watch)
    }

    @Test func theSamePairingTwiceIsRefused() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(Self.keys.utf8).write(to: URL(fileURLWithPath: keys))
        let secret = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secret)
        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secret, "--secret-file", secret, "--listen", "127.0.0.1:0"])
        defer { phone.stop() }
        let error = try await phone.next("the error event") { $0["event"] as? String == "error" }
        #expect((error["error"] as? String)?.contains("hold the same pairing") == true, "\(error)")
        #expect(try await exitStatus(of: phone.process, "the phone node to exit") == 2)
    }
}

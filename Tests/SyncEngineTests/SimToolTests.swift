import Foundation
@_spi(Testing) import SyncEngine
@_spi(Testing) @testable import SyncSim
import SyncTransport
import Testing

/// Fuzzing, shrinking, inspection and the binary's exit codes.
@Suite struct SimToolTests {
    @Test func fuzzSmallRunPasses() async {
        let fuzzer = Fuzzer(runs: 6, seed: 1000, ops: 30)
        let (completed, failure) = await fuzzer.run { _, _ in }
        #expect(completed == 6)
        #expect(failure == nil, "\(failure?.detail ?? "")")
    }

    @Test func fuzzOverTCPRunsItsScenariosOnRealSockets() async {
        var fuzzer = Fuzzer(runs: 4, seed: 1000, ops: 30, workers: 1)
        fuzzer.transport = .tcp
        let (completed, failure) = await fuzzer.run { _, _ in }
        #expect(completed == 4)
        #expect(failure == nil, "\(failure?.detail ?? "")")
    }

    @Test func fuzzFindsAndShrinksAnInjectedFault() async throws {
        let options = RunOptions(testingFaults: try Simulation.testingFaults(named: ["skip-tombstones"]))
        let fuzzer = Fuzzer(runs: 20, seed: 1, ops: 40, options: options)
        let (_, found) = await fuzzer.run { _, _ in }
        let failure = try #require(found)
        let shrunk = await Shrinker(maxRuns: 150, options: options).shrink(failure.scenario, failing: Set(failure.failedInvariants))
        #expect(shrunk.timeline.count < failure.scenario.timeline.count)
        let replay = await Simulation.run(shrunk, name: "min", options: options)
        #expect(replay.exitCode == Simulation.Exit.invariantFailed)
        // The shrunk file parses back to the same scenario.
        let reparsed = try Scenario.parse(shrunk.json)
        #expect(reparsed.timeline.map(\.action) == shrunk.timeline.map(\.action))
    }

    @Test func inspectElidesValuesAndNeverShowsEncryptedOnes() throws {
        let folder = TempFolder()
        let registry = try KeyRegistry(descriptors: [
            KeyDescriptor(name: "plain"), KeyDescriptor(name: "hidden", security: .encrypted), KeyDescriptor(name: "manual", policy: .manual),
        ])
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry,
                                  options: StoreOptions(clock: ManualClock(), encryption: .keyFile(path: folder.file("k"))))
        try store.setEncoded(Array("\"visible-text\"".utf8), forKey: "plain")
        try store.setEncoded(Array("\"secret-text\"".utf8), forKey: "hidden")
        try store.setEncoded(Array("1".utf8), forKey: "manual")
        let elided = try StoreInspection(path: folder.file("s.sqlite"), includeValues: false)
        #expect(elided.entries.count == 3)
        #expect(!elided.text.contains("visible-text"))
        #expect(elided.pending.count == 3)
        let shown = try StoreInspection(path: folder.file("s.sqlite"), includeValues: true)
        #expect(shown.text.contains("visible-text"))
        #expect(!shown.text.contains("secret-text"))
        #expect(!shown.json.contains("secret-text"))
        #expect(shown.role == "phone")
    }

    /// One end-to-end check of the binary's exit codes (it is built with the tests).
    @Test func binaryExitCodes() async throws {
        let binary = syncsimBinary()
        try #require(FileManager.default.isExecutableFile(atPath: binary), "syncsim is not built at \(binary)")
        func run(_ args: [String]) async throws -> Int32 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = args
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return try await exitStatus(of: process, "syncsim \(args.joined(separator: " "))")
        }
        let basic = SimScenarioTests.path("basic-two-way")
        #expect(try await run(["run", basic]) == 0)
        #expect(try await run(["run", SimScenarioTests.path("conflicts-and-deletes"), "--inject-fault", "skip-tombstones"]) == 1)
        let folder = TempFolder()
        try "{\"description\": \"x\"}".write(toFile: folder.file("bad.json"), atomically: true, encoding: .utf8)
        #expect(try await run(["run", folder.file("bad.json")]) == 2)
    }
}

/// `syncsim fuzz` as a user runs it: the binary, its output and exit status.
@Suite(.timeLimit(.minutes(5))) struct FuzzCommandTests {
    /// Runs `syncsim fuzz` with `arguments`; its standard output and exit status.
    static func fuzz(_ arguments: [String]) async throws -> (text: String, status: Int32) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["fuzz"] + arguments
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Alone this takes under 2 s; in the parallel suite on two cores the body and its
        // awaits wait their turn for tens of seconds (one CI run passed 60 s), hence 150 s.
        let text = String(decoding: try await output(of: stdout, "the fuzz output", within: .seconds(150)), as: UTF8.self)
        let status = try await exitStatus(of: process, "syncsim fuzz \(arguments.joined(separator: " "))", within: .seconds(150))
        return (text, status)
    }

    /// A fuzz failure names the seed its failure file is named after.
    @Test func theFailureNamesItsSeed() async throws {
        let folder = TempFolder()
        let (text, status) = try await Self.fuzz(["--runs", "200", "--seed", "500", "--inject-fault", "skip-tombstones", "--out-dir", folder.path])
        #expect(status == 1)
        let failureFile = try #require(try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .first { $0.hasPrefix("fuzz-failure-") && !$0.hasSuffix("-min.json") }, "no failure file in \(folder.path)")
        let seed = failureFile.dropFirst("fuzz-failure-".count).dropLast(".json".count)
        #expect(text.contains("seed \(seed) failed"), "\(text)")
    }

    /// `--transport tcp` finds an injected fault on real sockets, and its replay commands run over TCP too.
    @Test func aFailureOverTCPIsReplayedOverTCP() async throws {
        let folder = TempFolder()
        let (text, status) = try await Self.fuzz(["--runs", "300", "--seed", "5000000", "--ops", "60", "--transport", "tcp",
                                                  "--inject-fault", "last-arrival-wins", "--out-dir", folder.path])
        #expect(status == 1)
        let replays = text.split(separator: "\n").filter { $0.hasPrefix("replay: syncsim run \(folder.path)/fuzz-failure-") }
        // The report's own replay line and the two of the failure files (whole and shrunk).
        #expect(replays.count == 3, "\(text)")
        #expect(replays.allSatisfy { $0.contains(" --transport tcp") && $0.contains(" --inject-fault last-arrival-wins") }, "\(text)")
    }
}

/// `syncsim node`'s arguments for several pairings.
@Suite struct NodeArgumentTests {
    let base = ["--role", "phone", "--db", "p.sqlite", "--keys", "k.json"]

    @Test func aListeningPhoneTakesOneSecretFilePerWatch() throws {
        let command = try NodeCommand.parse(base + ["--secret-file", "a", "--secret-file", "b", "--listen", "127.0.0.1:0"])
        #expect(command.secretFiles == ["a", "b"])
    }

    @Test func aDialingWatchTakesExactlyOneSecretFile() throws {
        #expect(throws: (any Error).self) {
            _ = try NodeCommand.parse(base + ["--secret-file", "a", "--secret-file", "b", "--connect", "127.0.0.1:7000"])
        }
        do {
            _ = try NodeCommand.parse(base + ["--secret-file", "a", "--secret-file", "b", "--connect", "127.0.0.1:7000"])
        } catch {
            #expect(NodeCommand.message(for: error).contains("--connect takes exactly one --secret-file"), "\(NodeCommand.message(for: error))")
        }
        #expect(throws: (any Error).self) { _ = try NodeCommand.parse(base + ["--connect", "127.0.0.1:7000"]) }
        _ = try NodeCommand.parse(base + ["--secret-file", "a", "--connect", "127.0.0.1:7000"])
    }

    /// A watch holds one pairing whatever it syncs over: a listening or
    /// mailbox-only watch took several secrets, and so several phones.
    @Test func aWatchTakesExactlyOneSecretFileOnEveryTransport() throws {
        let watch = ["--role", "watch", "--db", "w.sqlite", "--keys", "k.json", "--secret-file", "a", "--secret-file", "b"]
        for transport in [["--listen", "127.0.0.1:0"], ["--mailbox", "m1", "--mailbox", "m2"], ["--listen", "127.0.0.1:0", "--mailbox", "m1", "--mailbox", "m2"]] {
            do {
                _ = try NodeCommand.parse(watch + transport)
                Issue.record("a watch took two pairings with \(transport)")
            } catch {
                #expect(NodeCommand.message(for: error).contains("a watch holds one pairing"), "\(NodeCommand.message(for: error))")
            }
        }
        _ = try NodeCommand.parse(["--role", "watch", "--db", "w.sqlite", "--keys", "k.json", "--secret-file", "a", "--listen", "127.0.0.1:0"])
        _ = try NodeCommand.parse(base + ["--secret-file", "a", "--secret-file", "b", "--mailbox", "m1", "--mailbox", "m2"])
    }
}

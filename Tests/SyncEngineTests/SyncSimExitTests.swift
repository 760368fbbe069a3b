import ArgumentParser
import Foundation
import Synchronization
@testable import SyncSim
import SyncTransport
import Testing

/// `syncsim`'s failures at run time: one line on stderr, the documented exit
/// code, no usage; the usage only for usage errors. Fuzz progress without a terminal.
@Suite(.timeLimit(.minutes(5))) struct SyncSimExitTests {
    struct Result {
        var status: Int32
        var stderr: String
        var stdout: String
        var stderrLines: [Substring] { stderr.split(whereSeparator: \.isNewline) }
    }

    /// Runs the built binary with stdin empty and stdout, stderr piped (not a terminal).
    func syncsim(_ arguments: [String]) async throws -> Result {
        let binary = syncsimBinary()
        try #require(FileManager.default.isExecutableFile(atPath: binary), "syncsim is not built at \(binary)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let what = "syncsim \(arguments.joined(separator: " "))"
        async let stdout = output(of: out, "\(what): stdout")
        async let stderr = output(of: err, "\(what): stderr")
        let (o, e) = try await (stdout, stderr)
        let status = try await exitStatus(of: process, what)
        return Result(status: status, stderr: String(decoding: e, as: UTF8.self), stdout: String(decoding: o, as: UTF8.self))
    }

    @Test func failuresAtRunTimePrintOneLineAndTheDocumentedCode() async throws {
        let folder = TempFolder()
        // A secret that cannot be written: runtime failure, 3.
        let unwritable = try await syncsim(["pair", "--out", folder.file("no-such-folder/pair.secret")])
        #expect(unwritable.status == Simulation.Exit.runtimeFailure)
        #expect(unwritable.stderrLines.count == 1, "\(unwritable.stderr)")
        #expect(unwritable.stderr.hasPrefix("syncsim pair: error: cannot write the pairing secret"), "\(unwritable.stderr)")
        #expect(!unwritable.stderr.contains("Usage"))

        // An existing secret without --force: the same, with the hint.
        let secret = folder.file("pair.secret")
        #expect(try await syncsim(["pair", "--out", secret]).status == 0)
        let existing = try await syncsim(["pair", "--out", secret])
        #expect(existing.status == Simulation.Exit.runtimeFailure)
        #expect(existing.stderrLines.count == 1 && existing.stderr.contains("--force"), "\(existing.stderr)")

        // A file that is not a store: bad input, 2.
        try "not a database, not even close".write(toFile: folder.file("x.sqlite"), atomically: true, encoding: .utf8)
        let inspect = try await syncsim(["inspect", folder.file("x.sqlite")])
        #expect(inspect.status == Simulation.Exit.badInput)
        #expect(inspect.stderrLines.count == 1, "\(inspect.stderr)")
        #expect(inspect.stderr.hasPrefix("syncsim inspect: error: "), "\(inspect.stderr)")
        #expect(!inspect.stderr.contains("Usage"))

        // A scenario that cannot be used: 2; one that cannot be run (its stores kept under a file): 3.
        try #"{"bogus": 1}"#.write(toFile: folder.file("bad.json"), atomically: true, encoding: .utf8)
        let badScenario = try await syncsim(["run", folder.file("bad.json")])
        #expect(badScenario.status == Simulation.Exit.badScenario)
        #expect(badScenario.stderrLines.count == 1, "\(badScenario.stderr)")
        #expect(badScenario.stderr.hasPrefix("syncsim run: error: bad scenario: "), "\(badScenario.stderr)")
        let scenario = SimScenarioTests.fixtures + "/basic-two-way.json"
        let unrunnable = try await syncsim(["run", scenario, "--keep-stores", folder.file("x.sqlite") + "/stores"])
        #expect(unrunnable.status == Simulation.Exit.runtimeFailure, "\(unrunnable.stderr)")
        #expect(unrunnable.stderrLines.count == 1, "\(unrunnable.stderr)")
        #expect(unrunnable.stderr.hasPrefix("syncsim run: error: the simulator could not run the scenario"), "\(unrunnable.stderr)")
        #expect(unrunnable.stderr.contains("(--keep-stores): Not a directory"), "\(unrunnable.stderr)")
        #expect(!unrunnable.stderr.contains("Usage"))

        // A node that cannot listen (an address this machine does not have): 3, the error last, no usage.
        try #"{"keys": [{"name": "a"}]}"#.write(toFile: folder.file("keys.json"), atomically: true, encoding: .utf8)
        let node = try await syncsim(["node", "--role", "phone", "--db", folder.file("p.sqlite"), "--keys", folder.file("keys.json"),
                                      "--secret-file", secret, "--listen", "192.0.2.1:0"])
        #expect(node.status == Simulation.Exit.runtimeFailure, "\(node.stderr)")
        #expect(node.stderrLines.last?.hasPrefix("syncsim node: error: ") == true, "\(node.stderr)")
        #expect(!node.stderr.contains("Usage"))
    }

    @Test func usageErrorsStillPrintTheUsage() async throws {
        let missing = try await syncsim(["pair"])
        #expect(missing.status == Simulation.Exit.usage)
        #expect(missing.stderr.contains("Usage: syncsim pair"), "\(missing.stderr)")
        let fault = try await syncsim(["fuzz", "--runs", "1", "--inject-fault", "no-such-fault"])
        #expect(fault.status == Simulation.Exit.usage)
        #expect(fault.stderr.contains("Usage: syncsim fuzz"), "\(fault.stderr)")
    }

    /// An unknown `--inject-fault` exited 2 (bad scenario file) from `run`
    /// but 64 from `fuzz`: it is a bad option in both, so a usage error (64)
    /// whose message lists every known fault, and no scenario is read.
    @Test func anUnknownFaultIsAUsageErrorOfRunAndFuzzAlike() async throws {
        let scenario = SimScenarioTests.fixtures + "/basic-two-way.json"
        for arguments in [["run", scenario], ["fuzz", "--runs", "1"]] {
            let result = try await syncsim(arguments + ["--inject-fault", "skip-tombstones", "--inject-fault", "no-such-fault"])
            #expect(result.status == Simulation.Exit.usage, "\(arguments[0]): \(result.stderr)")
            #expect(result.stderr.contains("--inject-fault: unknown fault 'no-such-fault'"), "\(arguments[0]): \(result.stderr)")
            for known in ["skip-tombstones", "last-arrival-wins", "ignore-key-mismatch", "remove-rebaselined-at-once"] {
                #expect(result.stderr.contains(known), "\(arguments[0]) does not list \(known): \(result.stderr)")
            }
            #expect(result.stderr.contains("Usage: syncsim \(arguments[0])"), "\(arguments[0]): \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(arguments[0]): \(result.stdout)")
        }
    }

    /// `syncsim` without a subcommand printed the help on stdout and exited 0,
    /// so a script that forgot the subcommand went on as if it had run. It
    /// is a usage error now: the help on stderr, exit 64, nothing on stdout,
    /// as for a subcommand that does not exist.
    @Test func noSubcommandIsAUsageErrorWithTheHelpOnStderr() async throws {
        let bare = try await syncsim([])
        #expect(bare.status == Simulation.Exit.usage, "\(bare.stdout)")
        #expect(bare.stdout.isEmpty, "\(bare.stdout)")
        #expect(bare.stderr.contains("USAGE: syncsim <subcommand>"), "\(bare.stderr)")
        #expect(bare.stderr.contains("SUBCOMMANDS:") && bare.stderr.contains("run"), "\(bare.stderr)")
        let unknown = try await syncsim(["no-such-command"])
        #expect(unknown.status == Simulation.Exit.usage)
        #expect(unknown.stdout.isEmpty && unknown.stderr.contains("Usage: syncsim"), "\(unknown.stderr)")
    }

    @Test func helpPrintsTheUsageAndExitsZero() async throws {
        for arguments in [["--help"], ["bench", "--help"], ["help", "node"], ["run", "-h"]] {
            let help = try await syncsim(arguments)
            #expect(help.status == 0, "\(arguments): \(help.stderr)")
            #expect(help.stdout.contains("USAGE: syncsim"), "\(arguments): \(help.stdout)")
            #expect(!help.stderr.contains("error"), "\(arguments): \(help.stderr)")
        }
    }

    @Test func anErrorBecomesOneLineWithItsCode() throws {
        #expect(SyncSimCommands.runtimeFailure(ValidationError("bad option"), command: "syncsim x") == nil)
        #expect(SyncSimCommands.runtimeFailure(ExitCode(1), command: "syncsim x") == nil)
        let own = try #require(SyncSimCommands.runtimeFailure(CommandFailure(exitCode: 2, "first\nsecond"), command: "syncsim x"))
        #expect(own.exitCode == 2 && own.line == "syncsim x: error: first second")
        let other = try #require(SyncSimCommands.runtimeFailure(TransportError(.connectFailed, "no route"), command: "syncsim y"))
        #expect(other.exitCode == Simulation.Exit.runtimeFailure)
        #expect(other.line.hasPrefix("syncsim y: error: ") && other.line.contains("no route"))
    }

    @Test func progressWithoutATerminalIsPlainLines() async throws {
        let written = Mutex<[String]>([])
        let bar = ProgressBar(isTerminal: false) { text in written.withLock { $0.append(text) } }
        let start = ContinuousClock.now
        for done in 1...200 { bar.show(done, 200, since: start) }
        bar.finish()
        let plain = written.withLock { $0 }
        #expect(plain.count == 10, "\(plain)")
        #expect(plain.allSatisfy { $0.hasPrefix("fuzz: ") && $0.hasSuffix("\n") && !$0.contains("\r") })
        #expect(plain.first?.hasPrefix("fuzz: 20/200 scenarios") == true && plain.last?.hasPrefix("fuzz: 200/200 scenarios") == true)

        let drawn = Mutex<[String]>([])
        let terminal = ProgressBar(isTerminal: true) { text in drawn.withLock { $0.append(text) } }
        for done in 1...200 { terminal.show(done, 200, since: start) }
        terminal.finish()
        #expect(drawn.withLock { $0.dropLast().allSatisfy { $0.hasPrefix("\r[") } && $0.last == "\n" })

        // The binary, its stderr a pipe: plain lines, no carriage returns.
        let folder = TempFolder()
        let fuzz = try await syncsim(["fuzz", "--runs", "10", "--ops", "10", "--out-dir", folder.path])
        #expect(fuzz.status == 0, "\(fuzz.stderr)")
        #expect(!fuzz.stderr.contains("\r"), "\(fuzz.stderr.debugDescription)")
        #expect(fuzz.stderrLines.last?.hasPrefix("fuzz: 10/10 scenarios, ") == true, "\(fuzz.stderr)")
        #expect(fuzz.stderrLines.count == 10, "\(fuzz.stderr)")
    }
}

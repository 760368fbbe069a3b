import ArgumentParser
import Foundation
import Synchronization

/// `syncsim fuzz [--runs N] [--seed S] [--ops M] [--transport sim|tcp]`.
public struct FuzzCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "fuzz",
        abstract: "Run random scenarios; a failure is written to a file, shrunk, and exits 1.",
        discussion: "Run i uses seed S+i. On failure writes fuzz-failure-<seed>.json and a shrunk fuzz-failure-<seed>-min.json.")

    @Option(parsing: .unconditional, help: "How many scenarios.") var runs: Int = 100
    /// Nil when not given (`firstSeed` is then 1): the limit's message names `--runs` then.
    @Option(parsing: .unconditional, help: "The first seed (default: 1).") var seed: UInt64?
    @Option(parsing: .unconditional, help: "Steps per scenario.") var ops: Int = 50
    @Option(help: "Where failure files go.") var outDir: String = "."
    @Option(parsing: .unconditional, help: "The most watches per scenario (1...3); each scenario gets 1 to this many.") var watches: Int = Scenario.maxWatches
    @Flag(help: "No power cuts inside SQLite transactions.") var noPowerCuts = false
    @Flag(help: "No queued delivery through a mailbox (and no node-down periods it brings).") var noMailbox = false
    @Flag(help: "No tombstone purges (short retention and peer horizon, purge steps).") var noPurges = false
    @Flag(help: "No node that starts with an older app (keys declared otherwise) and is updated later.") var noAppUpdates = false
    @Flag(help: "No key with the union resolver whose values (some near or over the 100 KB limit) merge.") var noLargeMerges = false
    @Flag(help: "No node that starts with an app of an older session protocol (\(ScenarioGenerator.olderProtocolRange.lowerBound) to \(ScenarioGenerator.olderProtocolRange.upperBound)) and is updated later.") var noOlderProtocols = false
    @Flag(help: "No node whose disk fills up for a while (its writes and what it receives fail with storage-full).") var noDiskFull = false
    @Flag(help: "No replaced watch set up from a backup of a watch's store (its own, or another's that stays paired).") var noRestoredCopies = false
    @Flag(help: "No node asking its peers for their manual changes (requestManual steps).") var noManualRequests = false
    @Option(help: "sim (virtual time, default) or tcp (real sockets on 127.0.0.1, one scenario at a time, in real time: a failure may not repeat on replay).")
    var transport: SimTransport = .sim
    @Option(name: .customLong("inject-fault"), help: .hidden) var injectFault: [String] = []

    public init() {}

    /// The numeric options parse `.unconditional`ly: `--runs -1` is told
    /// what is wrong with -1, not "Missing value" (-1 taken for an option).
    public func validate() throws {
        guard runs >= 1 else { throw ValidationError("--runs must be at least 1") }
        guard (1...10_000).contains(ops) else { throw ValidationError("--ops must be in 1...10000") }
        guard (1...Scenario.maxWatches).contains(watches) else { throw ValidationError("--watches must be in 1...\(Scenario.maxWatches)") }
        // A failure's file must replay: scenario seeds are at most Int64.max, the last run's
        // (--seed + --runs - 1) too. Checked without overflow: runs - 1 is 0...Int64.max - 1.
        let lastFirstSeed = UInt64(Int64.max) - UInt64(runs - 1)
        guard firstSeed <= lastFirstSeed else {
            guard seed != nil else {
                // No seed given: the runs are too many for the default one.
                throw ValidationError("--runs \(runs) leaves no seed: the last run's seed, --seed + --runs - 1, must stay within Int64.max (\(Int64.max)); "
                                      + "with the default --seed \(firstSeed), --runs must be at most \(UInt64(Int64.max) - firstSeed + 1)")
            }
            throw ValidationError("--seed must be at most \(lastFirstSeed) with --runs \(runs): the last run's seed, --seed + --runs - 1, "
                                  + "must stay within Int64.max (\(Int64.max))")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: outDir, isDirectory: &isDirectory), isDirectory.boolValue,
              FileManager.default.isWritableFile(atPath: outDir) else {
            throw ValidationError("--out-dir \(outDir) is not a folder this process can write: a failure could not be kept")
        }
        _ = try Simulation.options(injecting: injectFault)
    }

    /// The seed of the first run: `--seed`, or 1.
    var firstSeed: UInt64 { seed ?? 1 }

    public func run() async throws {
        let faults = try Simulation.options(injecting: injectFault)
        var fuzzer = Fuzzer(runs: runs, seed: firstSeed, ops: ops, options: faults)
        fuzzer.outDir = outDir
        fuzzer.maxWatches = watches
        fuzzer.powerCuts = !noPowerCuts
        fuzzer.mailbox = !noMailbox
        fuzzer.purges = !noPurges
        fuzzer.appUpdates = !noAppUpdates
        fuzzer.largeMerges = !noLargeMerges
        fuzzer.olderProtocols = !noOlderProtocols
        fuzzer.diskFull = !noDiskFull
        fuzzer.restoredCopies = !noRestoredCopies
        fuzzer.manualRequests = !noManualRequests
        fuzzer.transport = transport
        // Over TCP each scenario runs its nodes' tasks in real time: one at a time, so that two do not starve each other.
        if transport == .tcp { fuzzer.workers = 1 }
        let start = ContinuousClock.now
        let bar = ProgressBar()
        let (completed, failure) = await fuzzer.run { done, total in bar.show(done, total, since: start) }
        let seconds = max(0.001, (ContinuousClock.now - start) / .seconds(1))
        bar.finish()
        let rate = Double(completed) / seconds
        guard let failure else {
            let over = transport == .sim ? "" : " over \(transport.rawValue)"
            print("\(completed) scenarios passed\(over) (seeds \(firstSeed)...\(fuzzer.runSeed(runs - 1)), \(ops) ops each) in \(String(format: "%.1f", seconds)) s: \(String(format: "%.1f", rate)) scenarios/second")
            return
        }
        let path = "\(outDir)/fuzz-failure-\(failure.seed).json"
        let minPath = "\(outDir)/fuzz-failure-\(failure.seed)-min.json"
        // The report first: a file that cannot be written must not take the failure with it.
        print(failure.detail)
        try failure.scenario.json.write(toFile: path, atomically: true, encoding: .utf8)
        print("seed \(failure.seed) failed (\(failure.failedInvariants.joined(separator: ", "))) after \(completed) scenarios passed; written to \(path)")
        fflush(nil)  // the failure shows before the shrink (which over TCP takes minutes), also in a pipe
        printError("shrinking…")
        let shrunk = await Shrinker(options: faults, transport: transport).shrink(failure.scenario, failing: Set(failure.failedInvariants))
        try shrunk.json.write(toFile: minPath, atomically: true, encoding: .utf8)
        let suffix = injectFault.map { " --inject-fault \($0)" }.joined() + (transport == .sim ? "" : " --transport \(transport.rawValue)")
        print("shrunk from \(failure.scenario.timeline.count) to \(shrunk.timeline.count) steps: \(minPath)")
        print("replay: syncsim run \(SimReport.shellQuoted(path))\(suffix)")
        print("replay: syncsim run \(SimReport.shellQuoted(minPath))\(suffix)")
        print("\(String(format: "%.1f", rate)) scenarios/second")
        throw ExitCode(Simulation.Exit.invariantFailed)
    }
}

/// Fuzz progress on stderr: on a terminal one line redrawn in place (a bar);
/// otherwise (a pipe, a CI log) a plain line at each tenth of the run.
final class ProgressBar: Sendable {
    private let isTerminal: Bool
    private let write: @Sendable (String) -> Void
    private let last = Mutex<Int>(-1)

    /// `isTerminal`: whether stderr is a terminal (`isatty`); `write` receives the text (stderr by default).
    init(isTerminal: Bool = isatty(STDERR_FILENO) == 1,
         write: @escaping @Sendable (String) -> Void = { try? FileHandle.standardError.write(contentsOf: Data($0.utf8)) }) {
        self.isTerminal = isTerminal
        self.write = write
    }

    func show(_ done: Int, _ total: Int, since start: ContinuousClock.Instant) {
        let width = isTerminal ? 30 : 10
        let filled = total > 0 ? min(width, done * width / total) : width
        let shouldDraw = last.withLock { last -> Bool in
            if isTerminal {
                guard filled != last || done == total || done % 10 == 0 else { return false }
            } else {
                guard filled > max(last, 0) else { return false }
            }
            last = filled
            return true
        }
        guard shouldDraw else { return }
        let seconds = max(0.001, (ContinuousClock.now - start) / .seconds(1))
        let rate = "\(String(format: "%.1f", Double(done) / seconds)) scenarios/s"
        if isTerminal {
            write("\r[\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(done)/\(total)  \(rate)")
        } else {
            write("fuzz: \(done)/\(total) scenarios, \(rate)\n")
        }
    }

    func finish() {
        if isTerminal { write("\n") }
    }
}

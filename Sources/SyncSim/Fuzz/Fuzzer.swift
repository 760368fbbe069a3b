import Foundation
import SyncEngine

/// Runs many generated scenarios, two at a time, and stops at the first failure.
public struct Fuzzer: Sendable {
    public var runs: Int
    public var seed: UInt64
    public var ops: Int
    public var options: RunOptions
    /// Parallel runs (the machine has two cores).
    public var workers: Int
    /// Where failure files are written (named in the replay command).
    public var outDir = "."
    /// The most watches a generated scenario gets (1…3).
    public var maxWatches = Scenario.maxWatches
    /// Whether generated scenarios get power cuts.
    public var powerCuts = true
    /// Whether scenarios may use queued delivery through a mailbox.
    public var mailbox = true
    /// Whether scenarios may purge tombstones (short retention and peer horizon, `purge` steps).
    public var purges = true
    /// Whether scenarios may start a node with an older app and update it.
    public var appUpdates = true
    /// Whether scenarios may get a key with the `union` resolver whose large values merge.
    public var largeMerges = true
    /// Whether scenarios may start a node with an app of an older session protocol and update it.
    public var olderProtocols = true
    /// Whether scenarios may fill a node's disk for a while.
    public var diskFull = true
    /// Whether a replaced watch may be a device restored from a backup of a watch's store.
    public var restoredCopies = true
    /// Whether a node may ask its peers for their manual changes instead of a sync on them.
    public var manualRequests = true
    /// The link the scenarios run over: `.tcp` runs them on real sockets, in
    /// real time (a failure is then not always reproduced by its seed).
    public var transport = SimTransport.sim

    public init(runs: Int, seed: UInt64, ops: Int, options: RunOptions = RunOptions(), workers: Int = 2) {
        self.runs = runs
        self.seed = seed
        self.ops = ops
        self.options = options
        self.workers = max(1, workers)
    }

    /// A failing run.
    public struct Failure: Sendable {
        public var seed: UInt64
        public var scenario: Scenario
        public var failedInvariants: [String]
        /// The report's text, or the simulator error.
        public var detail: String
    }

    /// The seed of run `index`.
    public func runSeed(_ index: Int) -> UInt64 { seed &+ UInt64(index) }

    /// Runs the scenarios; `progress(done, total)` is called after each. Returns the first failure by run index.
    public func run(progress: @Sendable (Int, Int) -> Void) async -> (completed: Int, failure: Failure?) {
        let generator = ScenarioGenerator(ops: ops, maxWatches: maxWatches, powerCuts: powerCuts, mailbox: mailbox, purges: purges, appUpdates: appUpdates, largeMerges: largeMerges,
                                          olderProtocols: olderProtocols, diskFull: diskFull, restoredCopies: restoredCopies,
                                          manualRequests: manualRequests)
        let options = self.options
        let outDir = self.outDir
        let transport = self.transport
        return await withTaskGroup(of: (Int, Failure?).self) { group in
            var next = 0
            var done = 0
            var firstFailure: (Int, Failure)?
            func add() {
                let index = next
                let runSeed = self.runSeed(index)
                next += 1
                group.addTask {
                    let scenario = generator.scenario(seed: runSeed)
                    let outcome = await Simulation.run(scenario, name: "\(outDir)/fuzz-failure-\(runSeed).json", options: options, transport: transport)
                    if let report = outcome.report, report.passed { return (index, nil) }
                    let failed = outcome.report?.failedInvariants ?? []
                    return (index, Failure(seed: runSeed, scenario: scenario, failedInvariants: failed,
                                           detail: outcome.report?.text ?? outcome.runError ?? "unknown failure"))
                }
            }
            for _ in 0..<min(workers, runs) { add() }
            while let (index, failure) = await group.next() {
                done += 1
                progress(done, runs)
                if let failure, firstFailure == nil || index < firstFailure!.0 { firstFailure = (index, failure) }
                if firstFailure == nil && next < runs { add() }
            }
            return (done, firstFailure?.1)
        }
    }
}

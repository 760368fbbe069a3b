import Foundation
@_spi(Testing) import SyncEngine

/// How a scenario is run.
public struct RunOptions: Sendable {
    /// Overrides the scenario's seed.
    public var seed: UInt64?
    /// Deliberate engine faults, to prove the checker can fail.
    @_spi(Testing) public var testingFaults = TestingFaults()
    /// Virtual milliseconds between endpoint ticks (retransmission, hello retry).
    public var tickMs: Int64 = 100
    /// Virtual milliseconds a checkpoint may wait for both nodes to go idle.
    public var checkpointLimitMs: Int64 = 120_000
    /// Where the temporary store folders go: `$SYNCSIM_TMPDIR`, else `/dev/shm`
    /// when writable (real SQLite files, without waiting for the disk), else the system's.
    public var temporaryDirectory: String = RunOptions.defaultTemporaryDirectory
    /// When set, the nodes' store files are copied here at the end (for `syncsim inspect`).
    public var keepStoresIn: String?
    /// false opens a node that may lose power (a `powerCut` step) the way the
    /// engine worked before acknowledgements were durable: received batches
    /// acknowledged before they are synced, local writes with `.normal`
    /// durability. A deliberate fault, to prove the checker sees the loss.
    public var durableAcknowledgements = true

    public static var defaultTemporaryDirectory: String {
        if let dir = ProcessInfo.processInfo.environment["SYNCSIM_TMPDIR"], !dir.isEmpty { return dir }
        if FileManager.default.isWritableFile(atPath: "/dev/shm") { return "/dev/shm" }
        return NSTemporaryDirectory()
    }

    public init(seed: UInt64? = nil) {
        self.seed = seed
    }

    /// Options with deliberate engine faults.
    @_spi(Testing) public init(seed: UInt64? = nil, testingFaults: TestingFaults) {
        self.seed = seed
        self.testingFaults = testingFaults
    }
}

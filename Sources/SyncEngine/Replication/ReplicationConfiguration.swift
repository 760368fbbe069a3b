/// Tuning of a replication session. The defaults suit a phone and a watch.
public struct ReplicationConfiguration: Sendable {
    /// Identifies the pairing; both peers must agree. Derived from the pairing
    /// secret on TCP (`PairingSecret.epoch`). A new epoch re-baselines.
    public var pairingEpoch: String
    /// The session protocol versions this build speaks.
    public var protocolRange: ClosedRange<UInt16> = 1...1
    public var maxBatchEntries = 512
    public var maxBatchBytes = 256 * 1024
    /// Size of one chunk of a large value.
    public var chunkSize = 64 * 1024
    /// Messages in flight without an acknowledgement (backpressure).
    public var window = 4
    public var helloRetryMilliseconds: Int64 = 1_000
    public var retransmitMilliseconds: Int64 = 2_000

    public init(pairingEpoch: String = "unpaired") {
        self.pairingEpoch = pairingEpoch
    }
}

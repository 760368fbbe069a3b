/// A hybrid logical clock timestamp: physical milliseconds, a logical
/// counter and the node that issued it. Ordered by (time, counter, node), so
/// every node picks the same winner between two writes.
public struct HLCTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Physical milliseconds (48 bits used) and counter (16 bits), packed.
    public let packed: Int64
    /// The issuing node.
    public let node: UInt32

    public init(packed: Int64, node: UInt32) {
        self.packed = packed
        self.node = node
    }

    public init(physicalMilliseconds: Int64, counter: UInt16, node: UInt32) {
        packed = (physicalMilliseconds << 16) | Int64(counter)
        self.node = node
    }

    public var physicalMilliseconds: Int64 { packed >> 16 }
    public var counter: UInt16 { UInt16(truncatingIfNeeded: packed & 0xFFFF) }

    /// The largest physical time a version can carry: 2^47 - 1 ms (year 6429),
    /// so that `physicalMilliseconds << 16` never overflows.
    public static let maxPhysicalMilliseconds: Int64 = (1 << 47) - 1
    /// The largest packed value a clock issues or observes.
    public static let maxPacked: Int64 = (maxPhysicalMilliseconds << 16) | 0xFFFF

    /// The zero timestamp: older than every real write.
    public static let zero = HLCTimestamp(packed: 0, node: 0)

    /// The base a write at `version` records for the version it replaced:
    /// `replaced`, or `version` itself when `replaced` is later (a row written
    /// while the wall clock ran past `StoreOptions.maxRemoteClockAhead`, which
    /// the clock no longer follows once set right). The merge rule decides
    /// alike with either (a base only counts against versions below its
    /// entry's own), and a peer refuses an entry whose base is after its version.
    static func base(_ replaced: HLCTimestamp, of version: HLCTimestamp) -> HLCTimestamp {
        replaced > version ? version : replaced
    }

    public static func < (lhs: HLCTimestamp, rhs: HLCTimestamp) -> Bool {
        lhs.packed != rhs.packed ? lhs.packed < rhs.packed : lhs.node < rhs.node
    }

    public var description: String { "\(physicalMilliseconds).\(counter)@\(String(node, radix: 16))" }
}

/// One end of a two-ended link.
public enum LinkEnd: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case a
    case b

    /// The opposite end.
    public var other: LinkEnd { self == .a ? .b : .a }

    /// `a` or `b`.
    public var description: String { rawValue }
}

/// The faults a `SimulatedLink` applies to every frame, in virtual time.
///
/// Decodes from JSON with every field optional: `{"lossRate": 0.1}` keeps
/// the other defaults. Rates are probabilities in `0...1` (values outside are
/// clamped when used).
public struct LinkFaults: Sendable, Codable, Equatable, Hashable {
    /// One-way delay of every frame, in milliseconds.
    public var latencyMs: Int = 1
    /// Extra delay drawn uniformly from `0...jitterMs` per frame.
    public var jitterMs: Int = 0
    /// Probability that a frame is lost.
    public var lossRate: Double = 0
    /// Probability that a delivered frame arrives twice.
    public var duplicateRate: Double = 0
    /// Probability that a frame is held back so later frames overtake it.
    public var reorderRate: Double = 0
    /// Bytes per second per direction; `nil` means unlimited. Frames of one
    /// direction are serialised: each waits for the previous one's transmission.
    public var bandwidthBytesPerSecond: Int? = nil
    /// While `true`, nothing crosses: frames sent or due are dropped.
    public var partitioned: Bool = false

    /// Creates faults; the defaults are a perfect link with 1 ms latency.
    public init(
        latencyMs: Int = 1, jitterMs: Int = 0, lossRate: Double = 0, duplicateRate: Double = 0,
        reorderRate: Double = 0, bandwidthBytesPerSecond: Int? = nil, partitioned: Bool = false
    ) {
        self.latencyMs = latencyMs
        self.jitterMs = jitterMs
        self.lossRate = lossRate
        self.duplicateRate = duplicateRate
        self.reorderRate = reorderRate
        self.bandwidthBytesPerSecond = bandwidthBytesPerSecond
        self.partitioned = partitioned
    }

    private enum CodingKeys: String, CodingKey {
        case latencyMs, jitterMs, lossRate, duplicateRate, reorderRate, bandwidthBytesPerSecond, partitioned
    }

    /// Decodes faults; missing fields keep their defaults.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        latencyMs = try container.decodeIfPresent(Int.self, forKey: .latencyMs) ?? 1
        jitterMs = try container.decodeIfPresent(Int.self, forKey: .jitterMs) ?? 0
        lossRate = try container.decodeIfPresent(Double.self, forKey: .lossRate) ?? 0
        duplicateRate = try container.decodeIfPresent(Double.self, forKey: .duplicateRate) ?? 0
        reorderRate = try container.decodeIfPresent(Double.self, forKey: .reorderRate) ?? 0
        bandwidthBytesPerSecond = try container.decodeIfPresent(Int.self, forKey: .bandwidthBytesPerSecond)
        partitioned = try container.decodeIfPresent(Bool.self, forKey: .partitioned) ?? false
    }
}

/// Per-end counters of a `SimulatedLink`.
public struct LinkStatistics: Sendable, Equatable, Hashable, Codable {
    /// Frames this end sent (each `send` call counts once).
    public var framesSent: Int = 0
    /// Frames delivered to this end, duplicates included.
    public var framesReceived: Int = 0
    /// Frames this end sent that were lost or cut off by a partition.
    public var framesDropped: Int = 0
    /// Extra copies of this end's frames the link delivered.
    public var framesDuplicated: Int = 0
    /// Envelope bytes this end put on the wire (after compression).
    public var bytesSent: Int = 0
    /// Envelope bytes delivered to this end.
    public var bytesReceived: Int = 0
    /// Payload bytes this end sent, before compression.
    public var payloadBytesSent: Int = 0

    /// Creates zeroed counters.
    public init() {}

    /// The counters a `FrameConnection` reports, for the same end.
    public var connectionStatistics: ConnectionStatistics {
        var stats = ConnectionStatistics()
        stats.framesSent = framesSent
        stats.framesReceived = framesReceived
        stats.bytesSent = bytesSent
        stats.bytesReceived = bytesReceived
        stats.payloadBytesSent = payloadBytesSent
        return stats
    }
}

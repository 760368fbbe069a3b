/// Size limits every frame is checked against, before anything is allocated.
public struct FrameLimits: Sendable, Hashable, Codable {
    /// The largest payload on the wire (after compression and encryption), in
    /// bytes: at most `largestSize` (a larger setting, such as `.max`, is taken as it).
    public var maxFrameSize: Int {
        didSet { maxFrameSize = Self.bounded(maxFrameSize) }
    }
    /// The largest payload after inflating a compressed frame, in bytes: at
    /// most `largestSize` (a larger setting is taken as it).
    public var maxInflatedSize: Int {
        didSet { maxInflatedSize = Self.bounded(maxInflatedSize) }
    }
    /// Payloads of at least this many bytes are deflated when that makes them smaller.
    public var compressionThreshold: Int

    /// The largest size either limit takes: 2^31 − 30 bytes, so that a
    /// payload's size plus its header (13 bytes) and seal (16) fits an `Int`
    /// of 32 bits (a watch's arm64_32), whatever a peer's length field says.
    public static let largestSize = Int(Int32.max) - FrameEnvelope.headerSize - FrameSealer.tagSize

    /// Creates limits; the defaults are 4 MiB on the wire, 8 MiB inflated,
    /// compression from 256 bytes.
    public init(maxFrameSize: Int = 4 << 20, maxInflatedSize: Int = 8 << 20, compressionThreshold: Int = 256) {
        self.maxFrameSize = Self.bounded(maxFrameSize)
        self.maxInflatedSize = Self.bounded(maxInflatedSize)
        self.compressionThreshold = compressionThreshold
    }

    /// Decodes limits, bounded as `init` bounds them.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            maxFrameSize: try container.decode(Int.self, forKey: .maxFrameSize),
            maxInflatedSize: try container.decode(Int.self, forKey: .maxInflatedSize),
            compressionThreshold: try container.decode(Int.self, forKey: .compressionThreshold))
    }

    private static func bounded(_ size: Int) -> Int { min(size, largestSize) }

    /// 4 MiB on the wire, 8 MiB inflated, compression from 256 bytes.
    public static let `default` = FrameLimits()

    /// The limit on a payload's length field: `maxFrameSize`, at least 0.
    var wireLimit: Int { max(0, maxFrameSize) }
}

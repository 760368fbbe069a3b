/// Size limits every frame is checked against, before anything is allocated.
public struct FrameLimits: Sendable, Hashable, Codable {
    /// The largest payload on the wire (after compression and encryption), in bytes.
    public var maxFrameSize: Int
    /// The largest payload after inflating a compressed frame, in bytes.
    public var maxInflatedSize: Int
    /// Payloads of at least this many bytes are deflated when that makes them smaller.
    public var compressionThreshold: Int

    /// Creates limits; the defaults are 4 MiB on the wire, 8 MiB inflated,
    /// compression from 256 bytes.
    public init(maxFrameSize: Int = 4 << 20, maxInflatedSize: Int = 8 << 20, compressionThreshold: Int = 256) {
        self.maxFrameSize = maxFrameSize
        self.maxInflatedSize = maxInflatedSize
        self.compressionThreshold = compressionThreshold
    }

    /// 4 MiB on the wire, 8 MiB inflated, compression from 256 bytes.
    public static let `default` = FrameLimits()

    /// The limit on a payload's length field: `maxFrameSize`, at most `UInt32.max`.
    var wireLimit: Int { min(max(0, maxFrameSize), Int(clamping: UInt32.max)) }
}

/// Wire envelope constants (format version 1). See `Fixtures/wire/v1/README.md`.
public enum FrameEnvelope {
    /// `magic(2) version(1) type(1) flags(1) length(4) checksum(4)`.
    public static let headerSize = 13
}

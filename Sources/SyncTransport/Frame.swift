/// One message between two peers, as the transport sees it: a type byte and
/// opaque payload bytes. SyncTransport never looks inside the payload.
///
/// Types `0xF0...0xFF` are reserved for the transport itself (transport
/// hello, authentication, heartbeats); the engine uses `0x01...0xEF`, and
/// `0x00` is no type (TCP's `send` refuses it and those of the transport).
public struct Frame: Sendable, Hashable {
    /// The message type, chosen by the layer above.
    public var type: UInt8
    /// The payload bytes, uncompressed and unencrypted.
    public var payload: [UInt8]

    public init(type: UInt8, payload: [UInt8]) {
        self.type = type
        self.payload = payload
    }

    /// The first type number reserved for the transport's own frames.
    public static let firstReservedType: UInt8 = 0xF0
}

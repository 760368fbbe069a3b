/// One message between two peers, as the transport sees it: a type byte and
/// opaque payload bytes. SyncTransport never looks inside the payload.
///
/// Types `0xF0...0xFF` are reserved for the transport itself (transport
/// hello, authentication, heartbeats); the engine uses `0x01...0xEF`, and
/// `0x00` is no type (every connection's `send`, TCP's and the in-memory
/// one's, refuses it and those of the transport: `checkApplicationType`).
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

    /// Throws `.protocolViolation` for a type an application may not send:
    /// `0x00`, or one of the transport's own (`0xF0...0xFF`).
    static func checkApplicationType(_ type: UInt8) throws {
        guard type != 0 else {
            throw TransportError(.protocolViolation, "frame type 0x00 is not an application type; use 0x01...0xEF")
        }
        guard type < firstReservedType else {
            throw TransportError(.protocolViolation, "frame type 0x\(hex(type)) is reserved for the transport; use 0x01...0xEF")
        }
    }
}

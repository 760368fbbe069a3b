/// The frame types the transport reserves for itself (`0xF0...0xFF`).
/// Layouts are in `Fixtures/wire/v1/README.md`.
package enum TransportFrameType {
    /// Dialer -> listener: supported version range and a fresh nonce.
    package static let hello: UInt8 = 0xF0
    /// Listener -> dialer: chosen version, the listener's nonce and its proof.
    package static let challenge: UInt8 = 0xF1
    /// Dialer -> listener: the dialer's proof.
    package static let proof: UInt8 = 0xF2
    /// Either way, encrypted, empty: "still here". Never surfaced in `inbound`.
    package static let heartbeat: UInt8 = 0xF3
    /// Either way: an error code and message, then the sender closes.
    package static let error: UInt8 = 0xF4
    /// Dialer -> listener: like `hello`, and names the dialer's pairing
    /// (`PairingSecret.id`), so a listener with several pairings picks the secret.
    package static let pairingHello: UInt8 = 0xF5
}

/// The handshake and control messages, as pure values with their byte layouts.
enum TransportMessage {
    static let nonceSize = 32
    static let proofSize = 32

    /// `0xF0`: `minVersion(1) maxVersion(1) nonce(32)`, exactly 34 bytes.
    struct Hello: Equatable {
        var versions: ClosedRange<UInt8>
        var nonce: [UInt8]

        var frame: Frame {
            Frame(type: TransportFrameType.hello, payload: [versions.lowerBound, versions.upperBound] + nonce)
        }

        init(versions: ClosedRange<UInt8>, nonce: [UInt8]) {
            self.versions = versions
            self.nonce = nonce
        }

        init(_ frame: Frame) throws {
            try expect(frame, TransportFrameType.hello, "hello")
            var reader = ByteReader(frame.payload)
            versions = try readVersionRange(&reader)
            nonce = try reader.readRaw(count: nonceSize)
            try expectEnd(reader, "hello", size: 2 + nonceSize)
        }
    }

    /// `0xF5`: `minVersion(1) maxVersion(1) pairingID(16) nonce(32)`, exactly
    /// 50 bytes: a hello that names the dialer's pairing (`PairingSecret.id`).
    struct PairingHello: Equatable {
        var versions: ClosedRange<UInt8>
        var pairingID: [UInt8]
        var nonce: [UInt8]

        static var size: Int { 2 + PairingSecret.idByteCount + nonceSize }

        var frame: Frame {
            Frame(type: TransportFrameType.pairingHello, payload: [versions.lowerBound, versions.upperBound] + pairingID + nonce)
        }

        init(versions: ClosedRange<UInt8>, pairingID: [UInt8], nonce: [UInt8]) {
            self.versions = versions
            self.pairingID = pairingID
            self.nonce = nonce
        }

        init(_ frame: Frame) throws {
            try expect(frame, TransportFrameType.pairingHello, "pairing hello")
            var reader = ByteReader(frame.payload)
            versions = try readVersionRange(&reader)
            pairingID = try reader.readRaw(count: PairingSecret.idByteCount)
            nonce = try reader.readRaw(count: nonceSize)
            try expectEnd(reader, "pairing hello", size: Self.size)
        }
    }

    /// `0xF1`: `version(1) nonce(32) proof(32)`, exactly 65 bytes.
    struct Challenge: Equatable {
        var version: UInt8
        var nonce: [UInt8]
        var proof: [UInt8]

        var frame: Frame {
            Frame(type: TransportFrameType.challenge, payload: [version] + nonce + proof)
        }

        init(version: UInt8, nonce: [UInt8], proof: [UInt8]) {
            self.version = version
            self.nonce = nonce
            self.proof = proof
        }

        init(_ frame: Frame) throws {
            try expect(frame, TransportFrameType.challenge, "challenge")
            var reader = ByteReader(frame.payload)
            version = try reader.readUInt8()
            nonce = try reader.readRaw(count: nonceSize)
            proof = try reader.readRaw(count: proofSize)
            try expectEnd(reader, "challenge", size: 1 + nonceSize + proofSize)
        }
    }

    /// `0xF2`: `proof(32)`, exactly 32 bytes.
    struct Proof: Equatable {
        var proof: [UInt8]

        var frame: Frame { Frame(type: TransportFrameType.proof, payload: proof) }

        init(proof: [UInt8]) { self.proof = proof }

        init(_ frame: Frame) throws {
            try expect(frame, TransportFrameType.proof, "proof")
            var reader = ByteReader(frame.payload)
            proof = try reader.readRaw(count: proofSize)
            try expectEnd(reader, "proof", size: proofSize)
        }
    }

    /// `0xF4`: `code(string, <= 64 bytes) message(string, <= 1024 bytes)`,
    /// strings as varint length + UTF-8, nothing after them.
    ///
    /// Before authentication the text is a stranger's: only a known code is
    /// kept, with our own message (`preAuthenticationError`). After it, the
    /// peer's text is escaped and bounded (`transportError`).
    struct ErrorMessage: Equatable {
        var code: String
        var message: String

        var frame: Frame {
            var writer = ByteWriter()
            writer.writeString(String(code.utf8.prefix(64)) ?? "")
            writer.writeString(String(message.utf8.prefix(1024)) ?? "")
            return Frame(type: TransportFrameType.error, payload: writer.bytes)
        }

        init(_ error: TransportError) {
            code = error.code.rawValue
            message = error.message
        }

        init(_ frame: Frame) throws {
            try expect(frame, TransportFrameType.error, "error")
            var reader = ByteReader(frame.payload)
            code = try reader.readString(maxLength: 64)
            message = try reader.readString(maxLength: 1024)
            guard reader.isAtEnd else {
                throw TransportError(
                    .protocolViolation, "an error frame has \(reader.remaining) bytes after its message; it must end there")
            }
        }

        /// The error as the receiver reports it after authentication: the
        /// peer's code and message escaped (no control characters, bounded).
        func transportError(from peer: String) -> TransportError {
            TransportError(
                TransportError.Code(PeerText.escaped(code, maxLength: 64)),
                "\(peer) closed the connection: \(PeerText.escaped(message))")
        }

        /// The error as the receiver reports it before authentication: nothing
        /// the peer wrote, only its code if we know it, with our own words.
        /// `ourVersions` is the range we announced (for `unsupported-version`).
        func preAuthenticationError(from peer: String, ourVersions: ClosedRange<UInt8>) -> TransportError {
            let known = TransportError.Code.all.first { $0.rawValue == code }
            let reason: String
            switch known {
            case .unsupportedVersion?:
                reason = "it has no wire version in common with ours (\(ourVersions.lowerBound)...\(ourVersions.upperBound)); "
                    + "update the app on the device with the older version"
            case .authenticationFailed?:
                reason = "it could not verify that we hold its pairing secret (different pairing, or not our peer); "
                    + "pair the devices again if they belong together"
            case .protocolViolation?, .truncatedFrame?, .oversizedFrame?, .badMagic?, .checksumMismatch?,
                .decompressionFailed?, .decryptionFailed?:
                reason = "it found our handshake malformed (\(code)); check that both devices run a compatible build"
            case .timeout?:
                reason = "our handshake did not finish in its time limit; check the network and retry"
            case let code?:
                reason = "it gave the reason \(code)"
            case nil:
                return TransportError(
                    .closed, "\(peer) closed the connection during the handshake with an error code this build does not know")
            }
            return TransportError(known ?? .closed, "\(peer) refused the handshake: \(reason)")
        }

        /// Parses an error frame received before authentication into our own error.
        static func preAuthenticationError(_ frame: Frame, from peer: String, ourVersions: ClosedRange<UInt8>) -> TransportError {
            guard let message = try? ErrorMessage(frame) else {
                return TransportError(.protocolViolation, "\(peer) sent a malformed error frame during the handshake")
            }
            return message.preAuthenticationError(from: peer, ourVersions: ourVersions)
        }
    }

    /// A hello's `minVersion maxVersion`, refused when empty.
    private static func readVersionRange(_ reader: inout ByteReader) throws -> ClosedRange<UInt8> {
        let low = try reader.readUInt8()
        let high = try reader.readUInt8()
        guard low <= high else {
            throw TransportError(.protocolViolation, "hello announces an empty version range \(low)...\(high)")
        }
        return low...high
    }

    private static func expectEnd(_ reader: ByteReader, _ name: String, size: Int) throws {
        guard reader.isAtEnd else {
            throw TransportError(
                .protocolViolation,
                "a \(name) is exactly \(size) bytes; this one has \(reader.remaining) more (the peer is not a compatible SyncEngine)")
        }
    }

    private static func expect(_ frame: Frame, _ type: UInt8, _ name: String) throws {
        guard frame.type == type else {
            throw TransportError(
                .protocolViolation, "expected a transport \(name) frame (0x\(hex(type))), got type 0x\(hex(frame.type))")
        }
    }
}

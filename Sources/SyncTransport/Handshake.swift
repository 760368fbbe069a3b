import Crypto

/// The keys and version one authenticated connection uses.
struct SessionKeys: Sendable {
    var version: UInt8
    /// The epoch of the pairing both ends proved (`PairingSecret.epoch`).
    var pairingEpoch: String
    /// Seals what this end sends.
    var outbound: SymmetricKey
    /// Opens what this end receives.
    var inbound: SymmetricKey
}

/// What a handshake state machine asks its shell to do next.
enum HandshakeAction: Sendable {
    /// Send this frame, then wait for the next one.
    case send(Frame)
    /// Send this frame; the connection is established with these keys.
    case sendAndEstablish(Frame, SessionKeys)
    /// The connection is established with these keys.
    case establish(SessionKeys)
    /// Give up: send `notify` if present, then close and report `error`.
    case fail(TransportError, notify: Frame?)
}

/// The proofs and keys both roles compute the same way.
///
/// Proof = HMAC-SHA256(secret, label || dialerMin || dialerMax || version ||
/// dialerNonce || listenerNonce) with label `syncengine-v1 listener proof` or
/// `syncengine-v1 dialer proof`. Keys = HKDF-SHA256(secret, salt: dialerNonce
/// || listenerNonce, info: `syncengine-v1 dialer->listener` or
/// `syncengine-v1 listener->dialer`, then the version byte), 32 bytes each.
struct HandshakeTranscript {
    var secret: PairingSecret
    var dialerVersions: ClosedRange<UInt8>
    var version: UInt8
    var dialerNonce: [UInt8]
    var listenerNonce: [UInt8]

    func proof(by role: TransportRole) -> [UInt8] {
        var message = Array("syncengine-v1 \(role) proof".utf8)
        message += [dialerVersions.lowerBound, dialerVersions.upperBound, version]
        message += dialerNonce + listenerNonce
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: secret.symmetricKey))
    }

    func isValid(_ proof: [UInt8], by role: TransportRole) -> Bool {
        var message = Array("syncengine-v1 \(role) proof".utf8)
        message += [dialerVersions.lowerBound, dialerVersions.upperBound, version]
        message += dialerNonce + listenerNonce
        return HMAC<SHA256>.isValidAuthenticationCode(proof, authenticating: message, using: secret.symmetricKey)
    }

    func keys(for role: TransportRole) -> SessionKeys {
        let salt = dialerNonce + listenerNonce
        func key(_ label: String) -> SymmetricKey {
            HKDF<SHA256>.deriveKey(
                inputKeyMaterial: secret.symmetricKey, salt: salt,
                info: Array("syncengine-v1 \(label)".utf8) + [version], outputByteCount: 32)
        }
        let dialerToListener = key("dialer->listener")
        let listenerToDialer = key("listener->dialer")
        switch role {
        case .dialer:
            return SessionKeys(
                version: version, pairingEpoch: secret.epoch, outbound: dialerToListener, inbound: listenerToDialer)
        case .listener:
            return SessionKeys(
                version: version, pairingEpoch: secret.epoch, outbound: listenerToDialer, inbound: dialerToListener)
        }
    }
}

/// Which side of the TCP connection an end is.
enum TransportRole: String, Sendable, CustomStringConvertible {
    case dialer
    case listener
    var description: String { rawValue }
}

/// A fresh 32-byte nonce from the system's secure generator.
func makeNonce() -> [UInt8] {
    SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
}

/// The dialer's side of the handshake, as a pure state machine:
/// `start()` gives the hello; `receive(_:)` handles the listener's challenge
/// (or error) and says what to do.
struct DialerHandshake {
    private enum State { case idle, awaitingChallenge, finished }
    private var state = State.idle
    let secret: PairingSecret
    let versions: ClosedRange<UInt8>
    let nonce: [UInt8]
    /// Sends the hello that names the pairing (`0xF5`); `false` sends the
    /// older `0xF0`, which a listener answers with its primary secret.
    let namesPairing: Bool

    init(
        secret: PairingSecret, versions: ClosedRange<UInt8> = FrameEnvelope.supportedVersions, nonce: [UInt8] = makeNonce(),
        namesPairing: Bool = true
    ) {
        self.secret = secret
        self.versions = versions
        self.nonce = nonce
        self.namesPairing = namesPairing
    }

    /// The hello to send first.
    mutating func start() -> Frame {
        state = .awaitingChallenge
        if namesPairing {
            return TransportMessage.PairingHello(versions: versions, pairingID: secret.id, nonce: nonce).frame
        }
        return TransportMessage.Hello(versions: versions, nonce: nonce).frame
    }

    mutating func receive(_ frame: Frame) -> HandshakeAction {
        guard state == .awaitingChallenge else {
            return .fail(TransportError(.protocolViolation, "unexpected frame after the handshake ended"), notify: nil)
        }
        state = .finished
        if frame.type == TransportFrameType.error {
            // A stranger's words: never repeated, only a known code is kept.
            return .fail(
                TransportMessage.ErrorMessage.preAuthenticationError(frame, from: "the listener", ourVersions: versions),
                notify: nil)
        }
        let challenge: TransportMessage.Challenge
        do {
            challenge = try TransportMessage.Challenge(frame)
        } catch let error as TransportError {
            return .fail(error, notify: TransportMessage.ErrorMessage(error).frame)
        } catch {
            return .fail(TransportError(.protocolViolation, "malformed challenge"), notify: nil)
        }
        guard versions.contains(challenge.version) else {
            let error = TransportError(
                .unsupportedVersion,
                "the listener chose wire version \(challenge.version), outside ours \(versions.lowerBound)...\(versions.upperBound)")
            return .fail(error, notify: TransportMessage.ErrorMessage(error).frame)
        }
        let transcript = HandshakeTranscript(
            secret: secret, dialerVersions: versions, version: challenge.version,
            dialerNonce: nonce, listenerNonce: challenge.nonce)
        guard transcript.isValid(challenge.proof, by: .listener) else {
            return .fail(
                TransportError(
                    .authenticationFailed,
                    "the listener could not prove it holds our pairing secret (different pairing, or not our peer)"),
                notify: TransportMessage.ErrorMessage(
                    TransportError(.authenticationFailed, "the dialer could not verify the listener's proof")).frame)
        }
        return .sendAndEstablish(
            TransportMessage.Proof(proof: transcript.proof(by: .dialer)).frame, transcript.keys(for: .dialer))
    }
}

/// The listener's side of the handshake, as a pure state machine: it
/// receives the hello (answers with a challenge or a version error), then
/// the dialer's proof.
///
/// It may hold several pairings (a phone with several watches). A hello that
/// names its pairing (`0xF5`) is answered with that pairing's secret, or
/// refused with `authentication-failed` when the listener does not hold it;
/// an older hello (`0xF0`) with the first secret, the primary one.
struct ListenerHandshake {
    private enum State { case awaitingHello, awaitingProof(HandshakeTranscript), finished }
    private var state = State.awaitingHello
    /// The pairings this listener accepts, by id.
    let pairings: ListenerPairings
    let versions: ClosedRange<UInt8>
    let nonce: [UInt8]

    init(secret: PairingSecret, versions: ClosedRange<UInt8> = FrameEnvelope.supportedVersions, nonce: [UInt8] = makeNonce()) {
        self.init(secret: secret, additionalSecrets: [], versions: versions, nonce: nonce)
    }

    init(
        secret: PairingSecret, additionalSecrets: [PairingSecret],
        versions: ClosedRange<UInt8> = FrameEnvelope.supportedVersions, nonce: [UInt8] = makeNonce()
    ) {
        self.init(
            pairings: ListenerPairings(primary: secret, additional: additionalSecrets), versions: versions, nonce: nonce)
    }

    /// A listener's handshake with the pairings it built once (`TCPListener`).
    init(pairings: ListenerPairings, versions: ClosedRange<UInt8> = FrameEnvelope.supportedVersions, nonce: [UInt8] = makeNonce()) {
        self.pairings = pairings
        self.versions = versions
        self.nonce = nonce
    }

    mutating func receive(_ frame: Frame) -> HandshakeAction {
        let current = state
        state = .finished
        if frame.type == TransportFrameType.error {
            // A stranger's words: never repeated, only a known code is kept.
            return .fail(
                TransportMessage.ErrorMessage.preAuthenticationError(frame, from: "the dialer", ourVersions: versions),
                notify: nil)
        }
        switch current {
        case .awaitingHello:
            let hello: TransportMessage.Hello
            var pairingID: [UInt8]?
            do {
                if frame.type == TransportFrameType.pairingHello {
                    let named = try TransportMessage.PairingHello(frame)
                    hello = TransportMessage.Hello(versions: named.versions, nonce: named.nonce)
                    pairingID = named.pairingID
                } else {
                    hello = try TransportMessage.Hello(frame)
                }
            } catch {
                let failure = error as? TransportError ?? TransportError(.protocolViolation, "malformed hello")
                return .fail(failure, notify: TransportMessage.ErrorMessage(failure).frame)
            }
            let low = max(hello.versions.lowerBound, versions.lowerBound)
            let high = min(hello.versions.upperBound, versions.upperBound)
            guard low <= high else {
                let error = TransportError(
                    .unsupportedVersion,
                    "no common wire version: ours \(versions.lowerBound)...\(versions.upperBound), "
                        + "peer \(hello.versions.lowerBound)...\(hello.versions.upperBound)")
                return .fail(error, notify: TransportMessage.ErrorMessage(error).frame)
            }
            // The named pairing's secret, or the primary one for an older hello.
            // The id is a stranger's bytes: looked up, never logged or repeated.
            let secret: PairingSecret
            if let pairingID {
                guard let named = pairings.secret(named: pairingID) else {
                    return .fail(
                        TransportError(
                            .authenticationFailed,
                            "the dialer named a pairing this listener does not hold (a device paired with another phone, "
                                + "a pairing since removed, or not our peer); pair the devices again if they belong together"),
                        notify: TransportMessage.ErrorMessage(
                            TransportError(.authenticationFailed, "the listener does not hold the dialer's pairing")).frame)
                }
                secret = named
            } else {
                secret = pairings.primary
            }
            let transcript = HandshakeTranscript(
                secret: secret, dialerVersions: hello.versions, version: high,
                dialerNonce: hello.nonce, listenerNonce: nonce)
            state = .awaitingProof(transcript)
            return .send(
                TransportMessage.Challenge(version: high, nonce: nonce, proof: transcript.proof(by: .listener)).frame)
        case .awaitingProof(let transcript):
            let proof: TransportMessage.Proof
            do {
                proof = try TransportMessage.Proof(frame)
            } catch {
                let failure = error as? TransportError ?? TransportError(.protocolViolation, "malformed proof")
                return .fail(failure, notify: TransportMessage.ErrorMessage(failure).frame)
            }
            guard transcript.isValid(proof.proof, by: .dialer) else {
                return .fail(
                    TransportError(
                        .authenticationFailed,
                        "the dialer could not prove it holds our pairing secret (different pairing, replayed handshake, or not our peer)"),
                    notify: TransportMessage.ErrorMessage(
                        TransportError(.authenticationFailed, "the listener could not verify the dialer's proof")).frame)
            }
            return .establish(transcript.keys(for: .listener))
        case .finished:
            return .fail(TransportError(.protocolViolation, "unexpected frame after the handshake ended"), notify: nil)
        }
    }
}

/// One end's handshake state machine, whichever its role.
enum HandshakeMachine {
    case dialer(DialerHandshake)
    case listener(ListenerHandshake)

    mutating func receive(_ frame: Frame) -> HandshakeAction {
        switch self {
        case .dialer(var dialer):
            defer { self = .dialer(dialer) }
            return dialer.receive(frame)
        case .listener(var listener):
            defer { self = .listener(listener) }
            return listener.receive(frame)
        }
    }
}

extension FrameCodec {
    /// Opens a handshake frame (before authentication): plaintext, never
    /// compressed (our sender never compresses one, and inflating a
    /// stranger's bytes is work they did not pay for), never encrypted.
    /// Refuses anything else with `.protocolViolation`, without inflating.
    func openHandshakeEnvelope(_ envelope: Envelope) throws -> Frame {
        try checkVersion(envelope.version)
        try checkFlags(envelope.flags, type: envelope.type)
        guard !envelope.flags.contains(.compressed) else {
            throw TransportError(
                .protocolViolation,
                "a compressed frame of type 0x\(hex(envelope.type)) arrived before authentication; handshake frames are never compressed")
        }
        guard !envelope.flags.contains(.encrypted) else {
            throw TransportError(
                .protocolViolation,
                "frame of type 0x\(hex(envelope.type)) is encrypted, but no secure channel is established")
        }
        return Frame(type: envelope.type, payload: envelope.payload)
    }
}

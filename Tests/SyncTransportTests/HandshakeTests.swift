import Crypto
import Testing
@_spi(Benchmarks) @testable import SyncTransport

@Suite struct HandshakeTests {
    let secret = PairingSecret.generate()

    /// Runs both state machines against each other.
    func handshake(dialer dialerSecret: PairingSecret, listener listenerSecret: PairingSecret,
                   dialerVersions: ClosedRange<UInt8> = 1...1, listenerVersions: ClosedRange<UInt8> = 1...1)
        -> (dialer: Result<SessionKeys, TransportError>, listener: Result<SessionKeys, TransportError>?) {
        var dialer = DialerHandshake(secret: dialerSecret, versions: dialerVersions)
        var listener = ListenerHandshake(secret: listenerSecret, versions: listenerVersions)
        let hello = dialer.start()
        switch listener.receive(hello) {
        case .send(let challenge):
            switch dialer.receive(challenge) {
            case .sendAndEstablish(let proof, let dialerKeys):
                switch listener.receive(proof) {
                case .establish(let listenerKeys): return (.success(dialerKeys), .success(listenerKeys))
                case .fail(let error, _): return (.success(dialerKeys), .failure(error))
                default: Issue.record("unexpected listener action")
                }
            case .fail(let error, let notify):
                if let notify, case .fail(let listenerError, _) = listener.receive(notify) {
                    return (.failure(error), .failure(listenerError))
                }
                return (.failure(error), nil)
            default: Issue.record("unexpected dialer action")
            }
        case .fail(let error, let notify):
            guard let notify, case .fail(let dialerError, nil) = dialer.receive(notify) else {
                Issue.record("the listener must notify")
                return (.failure(error), .failure(error))
            }
            return (.failure(dialerError), .failure(error))
        default: Issue.record("unexpected listener action")
        }
        return (.failure(TransportError(.protocolViolation, "test")), nil)
    }

    @Test func sameSecretEstablishesMatchingKeys() throws {
        let result = handshake(dialer: secret, listener: secret)
        let dialerKeys = try result.dialer.get()
        let listenerKeys = try #require(result.listener).get()
        #expect(dialerKeys.version == 1)
        #expect(dialerKeys.outbound == listenerKeys.inbound)
        #expect(dialerKeys.inbound == listenerKeys.outbound)
        #expect(dialerKeys.inbound != dialerKeys.outbound)
        // Fresh nonces: a second handshake has other keys.
        let again = try handshake(dialer: secret, listener: secret).dialer.get()
        #expect(again.outbound != dialerKeys.outbound)
    }

    @Test func wrongSecretFailsOnTheDialerFirstAndTellsTheListener() {
        let result = handshake(dialer: secret, listener: PairingSecret.generate())
        guard case .failure(let error) = result.dialer else { Issue.record("must fail"); return }
        #expect(error.code == .authenticationFailed)
        guard case .failure(let listenerError)? = result.listener else { Issue.record("listener must fail"); return }
        #expect(listenerError.code == .authenticationFailed)
    }

    @Test func listenerRejectsAForgedProof() {
        var listener = ListenerHandshake(secret: secret)
        let hello = TransportMessage.Hello(versions: 1...1, nonce: makeNonce()).frame
        guard case .send = listener.receive(hello) else { Issue.record("expected a challenge"); return }
        let forged = TransportMessage.Proof(proof: makeNonce()).frame
        guard case .fail(let error, let notify) = listener.receive(forged) else { Issue.record("must fail"); return }
        #expect(error.code == .authenticationFailed)
        #expect(notify?.type == TransportFrameType.error)
    }

    @Test func replayedProofIsRejectedBecauseNoncesAreFresh() {
        // Record a successful dialer's hello and proof, replay them to a new listener.
        var dialer = DialerHandshake(secret: secret)
        var listener = ListenerHandshake(secret: secret)
        let hello = dialer.start()
        guard case .send(let challenge) = listener.receive(hello),
              case .sendAndEstablish(let proof, _) = dialer.receive(challenge) else { Issue.record("setup"); return }
        var victim = ListenerHandshake(secret: secret)
        guard case .send = victim.receive(hello) else { Issue.record("challenge"); return }
        guard case .fail(let error, _) = victim.receive(proof) else { Issue.record("replay must fail"); return }
        #expect(error.code == .authenticationFailed)
    }

    @Test func versionMismatchNamesBothRanges() {
        let result = handshake(dialer: secret, listener: secret, dialerVersions: 2...3, listenerVersions: 1...1)
        guard case .failure(let dialerError) = result.dialer, case .failure(let listenerError)? = result.listener else {
            Issue.record("must fail"); return
        }
        #expect(listenerError.code == .unsupportedVersion)
        #expect(listenerError.message == "no common wire version: ours 1...1, peer 2...3")
        #expect(dialerError.code == .unsupportedVersion)
        // The listener's own words are a stranger's before authentication: the dialer names its own range.
        #expect(dialerError.message.contains("no wire version in common with ours (2...3)"), "\(dialerError)")
        // Overlap: the highest common version wins.
        let overlap = handshake(dialer: secret, listener: secret, dialerVersions: 1...3, listenerVersions: 1...2)
        #expect((try? overlap.dialer.get().version) == 2)
    }

    @Test func malformedHandshakeFramesFailCleanly() {
        var listener = ListenerHandshake(secret: secret)
        guard case .fail(let error, _) = listener.receive(Frame(type: TransportFrameType.hello, payload: [1, 1, 2])) else {
            Issue.record("must fail"); return
        }
        #expect(error.code == .truncatedFrame)
        var other = ListenerHandshake(secret: secret)
        guard case .fail(let wrongType, _) = other.receive(Frame(type: 0x01, payload: [])) else { Issue.record("fail"); return }
        #expect(wrongType.code == .protocolViolation)
        var dialer = DialerHandshake(secret: secret)
        _ = dialer.start()
        guard case .fail(let short, _) = dialer.receive(Frame(type: TransportFrameType.challenge, payload: [1])) else {
            Issue.record("fail"); return
        }
        #expect(short.code == .truncatedFrame)
    }

    // MARK: Sealing

    func channelPair() -> (FrameSealer, FrameOpener) {
        let key = SymmetricKey(size: .bits256)
        return (FrameSealer(key: key, version: 1, codec: FrameCodec()), FrameOpener(key: key, version: 1, codec: FrameCodec()))
    }

    @Test func sealedFramesRoundTripAndHideThePayload() throws {
        var (sealer, opener) = channelPair()
        let marker = Array("PLAINTEXT-MARKER".utf8)
        for payload in [marker, marker + [UInt8](repeating: 0x41, count: 2_000), []] {
            let envelope = try sealer.seal(Frame(type: 9, payload: payload))
            #expect(envelope.flags.contains(.encrypted))
            #expect(!contains(try FrameCodec().encodeEnvelope(envelope), marker))
            #expect(try opener.open(envelope) == Frame(type: 9, payload: payload))
        }
    }

    @Test func replayedReorderedAndTamperedFramesFail() throws {
        var (sealer, opener) = channelPair()
        let first = try sealer.seal(Frame(type: 1, payload: [1]))
        let second = try sealer.seal(Frame(type: 1, payload: [2]))
        var reorder = opener
        expectCode(.decryptionFailed) { _ = try reorder.open(second) }
        _ = try opener.open(first)
        var replay = opener
        expectCode(.decryptionFailed) { _ = try replay.open(first) }
        var tampered = second
        tampered.payload[0] ^= 1
        var tamperOpener = opener
        expectCode(.decryptionFailed) { _ = try tamperOpener.open(tampered) }
        var retyped = second
        retyped.type = 2
        var retypeOpener = opener
        expectCode(.decryptionFailed) { _ = try retypeOpener.open(retyped) }
        var plain = second
        plain.flags.remove(.encrypted)
        var plainOpener = opener
        expectCode(.decryptionFailed) { _ = try plainOpener.open(plain) }
        #expect(try opener.open(second).payload == [2])
    }
}

import Foundation
import Testing
@testable import SyncTransport

/// One listener, several pairings (issue 15: a phone with several watches,
/// one secret each). The dialer's hello names its pairing (`0xF5`), so the
/// listener picks the secret without trial decryption.
@Suite(.timeLimit(.minutes(5))) struct MultiPairingTests {
    let watchA = PairingSecret.generate()
    let watchB = PairingSecret.generate()

    // MARK: The pairing id

    @Test func pairingIDIsStableShortAndNotTheSecretOrItsEpoch() throws {
        let secret = try PairingSecret(bytes: Array(0..<32))
        #expect(secret.id.count == PairingSecret.idByteCount)
        #expect(secret.id == (try PairingSecret(bytes: Array(0..<32))).id)
        #expect(watchA.id != watchB.id)
        #expect(!secret.bytes.contains(subsequence: secret.id) && !hex(secret.id).contains(secret.epoch))
        #expect(!secret.description.contains(hex(secret.id)), "the description shows the epoch only")
    }

    // MARK: The pure handshake

    /// Runs a dialer against a listener holding `listenerSecrets`; the keys of both, or the failures.
    func handshake(dialer secret: PairingSecret, namesPairing: Bool = true, listener listenerSecrets: [PairingSecret])
        -> (dialer: Result<SessionKeys, TransportError>, listener: Result<SessionKeys, TransportError>) {
        var dialer = DialerHandshake(secret: secret, namesPairing: namesPairing)
        var listener = ListenerHandshake(
            secret: listenerSecrets[0], additionalSecrets: Array(listenerSecrets.dropFirst()))
        let unexpected = TransportError(.protocolViolation, "unexpected action")
        switch listener.receive(dialer.start()) {
        case .send(let challenge):
            switch dialer.receive(challenge) {
            case .sendAndEstablish(let proof, let dialerKeys):
                if case .establish(let listenerKeys) = listener.receive(proof) { return (.success(dialerKeys), .success(listenerKeys)) }
                return (.success(dialerKeys), .failure(unexpected))
            case .fail(let error, _): return (.failure(error), .failure(unexpected))
            default: return (.failure(unexpected), .failure(unexpected))
            }
        case .fail(let error, let notify):
            guard let notify, case .fail(let dialerError, nil) = dialer.receive(notify) else {
                return (.failure(unexpected), .failure(error))
            }
            return (.failure(dialerError), .failure(error))
        default:
            return (.failure(unexpected), .failure(unexpected))
        }
    }

    @Test func theListenerAnswersEachNamedPairingWithItsOwnSecret() throws {
        for watch in [watchA, watchB] {
            let result = handshake(dialer: watch, listener: [watchA, watchB])
            let dialerKeys = try result.dialer.get()
            let listenerKeys = try result.listener.get()
            #expect(dialerKeys.outbound == listenerKeys.inbound && dialerKeys.inbound == listenerKeys.outbound)
            #expect(listenerKeys.pairingEpoch == watch.epoch && dialerKeys.pairingEpoch == watch.epoch)
        }
    }

    @Test func anUnknownPairingIsRefusedBeforeAnyProof() throws {
        var listener = ListenerHandshake(secret: watchA, additionalSecrets: [watchB])
        let stranger = PairingSecret.generate()
        var dialer = DialerHandshake(secret: stranger)
        guard case .fail(let error, let notify?) = listener.receive(dialer.start()) else {
            Issue.record("a hello naming an unknown pairing must fail, with an error frame")
            return
        }
        #expect(error.code == .authenticationFailed)
        #expect(!error.message.contains(hex(stranger.id)) && !error.message.contains(stranger.epoch))
        let sent = try TransportMessage.ErrorMessage(notify)
        #expect(sent.code == "authentication-failed")
        guard case .fail(let dialerError, nil) = dialer.receive(notify) else {
            Issue.record("the dialer must fail on the listener's error")
            return
        }
        #expect(dialerError.code == .authenticationFailed)
    }

    @Test func anOlderHelloIsAnsweredWithThePrimarySecret() throws {
        let one = handshake(dialer: watchA, namesPairing: false, listener: [watchA])
        #expect(try one.listener.get().pairingEpoch == watchA.epoch)
        let primary = handshake(dialer: watchA, namesPairing: false, listener: [watchA, watchB])
        #expect(try primary.dialer.get().pairingEpoch == watchA.epoch)
        // An older dialer of another pairing cannot be told apart: it fails to verify the primary's proof.
        let other = handshake(dialer: watchB, namesPairing: false, listener: [watchA, watchB])
        guard case .failure(let error) = other.dialer else {
            Issue.record("an older hello gets the primary secret only")
            return
        }
        #expect(error.code == .authenticationFailed)
    }

    @Test func aPairingHelloOfAnyOtherLengthIsRefused() {
        let good = TransportMessage.PairingHello(versions: 1...1, pairingID: watchA.id, nonce: makeNonce()).frame
        #expect(good.payload.count == 50)
        #expect((try? TransportMessage.PairingHello(good)) != nil)
        expectCode(.protocolViolation) {
            _ = try TransportMessage.PairingHello(Frame(type: good.type, payload: good.payload + [0]))
        }
        expectCode(.truncatedFrame) {
            _ = try TransportMessage.PairingHello(Frame(type: good.type, payload: Array(good.payload.dropLast())))
        }
        expectCode(.protocolViolation) {
            _ = try TransportMessage.PairingHello(Frame(type: good.type, payload: [2, 1] + Array(good.payload.dropFirst(2))))
        }
    }

    // MARK: Over TCP

    @Test func twoWatchesWithTheirOwnSecretsShareOneListener() async throws {
        let recorder = WireRecorder()
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(watchA, tap: recorder) { $0.additionalSecrets = [watchB] })
        var accepted: [String: any FrameConnection] = [:]
        var dialed: [String: any FrameConnection] = [:]
        for watch in [watchB, watchA] {
            let connection = try await TCPTransport.connect(
                host: "127.0.0.1", port: listener.port, configuration: testConfiguration(watch))
            #expect(connection.pairingEpoch == watch.epoch)
            let peer = try await first(of: listener.connections, "the listener's connection of watch \(watch.epoch)")
            #expect(peer.pairingEpoch == watch.epoch, "the listener tells which pairing each connection authenticated with")
            accepted[watch.epoch] = peer
            dialed[watch.epoch] = connection
        }
        // Each connection's keys work both ways, independently of the other's.
        for watch in [watchA, watchB] {
            let dialer = try #require(dialed[watch.epoch])
            let peer = try #require(accepted[watch.epoch])
            try await dialer.send(Frame(type: 1, payload: Array("from \(watch.epoch)".utf8)))
            try await peer.send(Frame(type: 2, payload: Array("to \(watch.epoch)".utf8)))
            #expect(try await receive(1, from: peer) == [Frame(type: 1, payload: Array("from \(watch.epoch)".utf8))])
            #expect(try await receive(1, from: dialer) == [Frame(type: 2, payload: Array("to \(watch.epoch)".utf8))])
        }
        // Both hellos named their pairing (0xF5 in the envelope's type byte).
        let inbound = recorder.bytes(.inbound)
        #expect(inbound.contains(subsequence: [0x53, 0x59, 1, 0xF5, 0, 0, 0, 0, 50]))
        #expect(inbound.contains(subsequence: watchA.id) && inbound.contains(subsequence: watchB.id))
        for connection in Array(accepted.values) + Array(dialed.values) { await connection.close() }
        await listener.close()
    }

    @Test func aDialerNamingAnUnknownPairingIsRefusedAndNothingOfItIsLogged() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(watchA, logs: logs) { $0.additionalSecrets = [watchB] })
        let stranger = PairingSecret.generate()
        let error = await expectCode(.authenticationFailed) {
            _ = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: testConfiguration(stranger))
        }
        #expect(error?.message.contains("could not verify that we hold its pairing secret") == true, "\(String(describing: error))")
        let rejection = try await first(of: listener.rejectionReports, "the rejection of the unknown pairing")
        #expect(rejection.reason.code == .authenticationFailed)
        #expect(rejection.reason.message.contains("does not hold"))
        await listener.close()
        #expect(try await all(of: listener.connections, "the connections to end after close").isEmpty)
        #expect(logs.all.contains { $0.contains("rejected the peer") && $0.contains("authentication-failed") })
        let strangerTraces = [hex(stranger.id), stranger.epoch, Data(stranger.id).base64EncodedString()]
        #expect(!logs.all.contains { line in strangerTraces.contains { line.contains($0) } }, "\(logs.all)")
    }

    @Test func anOldStyleHelloStillConnectsToAOneSecretListener() async throws {
        let recorder = WireRecorder()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(watchA))
        let old = try await TCPTransport.connect(
            host: "127.0.0.1", port: listener.port,
            configuration: testConfiguration(watchA, tap: recorder) { $0.namesPairingInHello = false })
        let accepted = try await first(of: listener.connections, "the older dialer's connection")
        #expect(accepted.pairingEpoch == watchA.epoch && old.pairingEpoch == watchA.epoch)
        #expect(Array(recorder.bytes(.outbound).prefix(4)) == [0x53, 0x59, 1, 0xF0], "the older hello went out")
        try await old.send(Frame(type: 1, payload: [42]))
        #expect(try await receive(1, from: accepted) == [Frame(type: 1, payload: [42])])
        await old.close()
        await accepted.close()
        await listener.close()
    }
}

extension Array where Element == UInt8 {
    fileprivate func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, count >= needle.count else { return false }
        return (0...(count - needle.count)).contains { self[$0..<$0 + needle.count].elementsEqual(needle) }
    }
}

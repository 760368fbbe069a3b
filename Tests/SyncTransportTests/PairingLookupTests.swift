import Testing
@testable import SyncTransport

/// A listener holding many pairings (a phone that served hundreds of
/// watches, or a hub): a handshake, which any stranger can start as often
/// as it likes, must not derive every pairing's id again (an HMAC each).
/// Before: the listener derived the id of each of its secrets on every
/// hello (500 HMACs for 500 pairings), and a stranger's refused hello cost
/// as much as a watch's. Now each id is derived once, when its
/// `PairingSecret` is made, and the listener looks the hello's id up in a
/// table it builds once.
@Suite(.timeLimit(.minutes(5))) struct PairingLookupTests {
    @Test func aHandshakeDerivesNoPairingIDWhateverTheNumberOfPairings() async throws {
        let secrets = (0..<500).map { _ in PairingSecret.generate() }
        let stranger = PairingSecret.generate()
        let watch = try #require(secrets.last)
        let counter = PairingSecret.Counter()
        try await PairingSecret.$idDerivations.withValue(counter) {
            // Bound inside the scope: the listener's tasks (accept loop, handshakes) count into it too.
            let listener = try await TCPListener.bind(
                host: "127.0.0.1", port: 0,
                configuration: testConfiguration(secrets[0]) { $0.additionalSecrets = Array(secrets.dropFirst()) })
            let before = counter.value
            let dialed = try await TCPTransport.connect(
                host: "127.0.0.1", port: listener.port, configuration: testConfiguration(watch))
            let accepted = try await first(of: listener.connections, "the watch's connection")
            #expect(accepted.pairingEpoch == watch.epoch && dialed.pairingEpoch == watch.epoch)
            await expectCode(.authenticationFailed) {
                _ = try await TCPTransport.connect(
                    host: "127.0.0.1", port: listener.port, configuration: testConfiguration(stranger))
            }
            let rejection = try await first(of: listener.rejectionReports, "the stranger's rejection")
            #expect(rejection.reason.code == .authenticationFailed)
            #expect(
                counter.value == before,
                "\(counter.value - before) pairing ids derived during two handshakes with a listener of \(secrets.count) pairings")
            // The counter does see derivations made in this scope (making a secret derives its id once).
            _ = try PairingSecret(bytes: Array(repeating: 7, count: PairingSecret.byteCount))
            #expect(counter.value == before + 1)
            await dialed.close()
            await accepted.close()
            await listener.close()
        }
    }

    @Test func thePureListenerHandshakeLooksTheNamedPairingUp() throws {
        let secrets = (0..<64).map { _ in PairingSecret.generate() }
        let pairings = ListenerPairings(primary: secrets[0], additional: Array(secrets.dropFirst()) + [secrets[3], secrets[0]])
        #expect(pairings.count == 64, "the same secret given twice counts once")
        #expect(pairings.primary == secrets[0])
        for secret in [secrets[0], secrets[31], secrets[63]] {
            #expect(pairings.secret(named: secret.id) == secret)
        }
        #expect(pairings.secret(named: PairingSecret.generate().id) == nil)
        #expect(pairings.secret(named: []) == nil && pairings.secret(named: Array(secrets[5].id.dropLast())) == nil)
        let counter = PairingSecret.Counter()
        PairingSecret.$idDerivations.withValue(counter) {
            var listener = ListenerHandshake(pairings: pairings)
            var dialer = DialerHandshake(secret: secrets[40])
            guard case .send(let challenge) = listener.receive(dialer.start()),
                  case .sendAndEstablish(let proof, let keys) = dialer.receive(challenge),
                  case .establish(let listenerKeys) = listener.receive(proof) else {
                Issue.record("the handshake with the 41st pairing failed")
                return
            }
            #expect(keys.pairingEpoch == secrets[40].epoch && listenerKeys.pairingEpoch == secrets[40].epoch)
        }
        #expect(counter.value == 0)
    }
}

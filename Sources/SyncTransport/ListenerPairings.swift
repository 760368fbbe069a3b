/// The pairings a listener accepts, by id (`PairingSecret.id`). Built once
/// per listener: a hello, which any stranger may send as often as it likes,
/// then costs one dictionary lookup, whatever the number of pairings (a
/// phone with hundreds of them derived every id again, an HMAC each, per
/// hello). The ids travel in the clear, so looking them up in a hash table
/// tells an observer nothing about the secrets.
struct ListenerPairings: Sendable {
    /// The secret an older hello (`0xF0`), which names no pairing, is answered with.
    let primary: PairingSecret
    private let byID: [[UInt8]: PairingSecret]

    /// `primary` and `additional`; a secret given more than once counts once.
    init(primary: PairingSecret, additional: [PairingSecret]) {
        self.primary = primary
        var byID = [primary.id: primary]
        byID.reserveCapacity(additional.count + 1)
        for secret in additional where byID[secret.id] == nil { byID[secret.id] = secret }
        self.byID = byID
    }

    /// The pairings of a listener's configuration: `secret`, then `additionalSecrets`.
    init(_ configuration: TCPConfiguration) {
        self.init(primary: configuration.secret, additional: configuration.additionalSecrets)
    }

    /// How many distinct pairings there are.
    var count: Int { byID.count }

    /// The secret whose id is `id` (a stranger's bytes: never logged), or nil.
    func secret(named id: [UInt8]) -> PairingSecret? {
        byID[id]
    }
}

import SyncTransport

/// Values a peer sent that are over this store's `StoreOptions.maxValueSize`.
///
/// The limit is each device's own (it is not exchanged when the devices
/// meet), so a peer with a larger one may send a value this store would not
/// let its own app write. Such a value is refused (`value-too-large` in the
/// acknowledgement: the sender reports it, moves on and never sends it again);
/// the receiver reports it too, here, so that its app learns that a value of
/// the peer's was not taken. Both stores keep what they hold.
extension SyncError {
    /// The `.error` event (`value-too-large`) for values over `limit` refused
    /// from a peer: how many, and the first `maxNamedRefusals` by key
    /// (escaped, `PeerText`) and size.
    static func refusedAsTooLarge(_ refused: [(key: String, size: Int)], limit: Int) -> SyncError {
        let named = refused.prefix(maxNamedRefusals).map { "\(PeerText.escaped($0.key)) (\($0.size) bytes)" }
        let more = refused.count > named.count ? ", and \(refused.count - named.count) more" : ""
        return SyncError(.valueTooLarge, "refused \(refused.count) values from the peer over this store's maxValueSize of \(limit) bytes: "
                         + "\(named.joined(separator: ", "))\(more); the peer keeps them (give both devices the same maxValueSize)")
    }
}

extension ApplyPlan {
    /// The entries refused for being over the store's `maxValueSize`, with their sizes.
    var refusedAsTooLarge: [(key: String, size: Int)] {
        steps.compactMap { step in
            guard case .refuse(let code, _) = step.verdict, code == SyncError.Code.valueTooLarge.rawValue else { return nil }
            return (step.entry.key, step.entry.value?.count ?? 0)
        }
    }
}

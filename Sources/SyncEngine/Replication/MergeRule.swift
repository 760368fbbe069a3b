/// One version of one key, as the merge rule sees it.
package struct EntryState: Sendable, Equatable {
    var version: HLCTimestamp
    /// The version this write replaced on its node (what its writer had seen).
    var base: HLCTimestamp
    var deleted: Bool
    /// Plaintext bytes; nil for a tombstone.
    var value: [UInt8]?
}

/// The conflict rule, pure: what to keep when an entry arrives from the peer.
///
/// - An entry whose writer had seen ours (its base is at least our version)
///   replaces it; one we had seen is ignored. Same version: same write.
/// - Otherwise the two writes are concurrent: a conflict. Last writer wins by
///   HLC (time, counter, node id), or, for keys with a resolver and two live
///   values, the resolver merges `(older, newer)` and the result keeps the
///   newer version — both devices compute the same pair and the same result.
/// - A merge larger than `maxValueSize` (what `set` refuses) is dropped: last
///   writer wins instead (rule `mergeTooLarge`), a choice both devices make alike.
package enum MergeRule {
    enum Outcome: Equatable {
        case ignore
        case take
        /// `base`: the later of the two writes' bases. A join has seen its two inputs, not every
        /// write before its version: a third write concurrent with both still conflicts with it
        /// (and joins it) when it arrives later, on whichever device.
        case merged(value: [UInt8], version: HLCTimestamp, base: HLCTimestamp)
    }

    struct Decision: Equatable {
        var outcome: Outcome
        /// Set when the two writes were concurrent.
        var conflict: (winner: Winner, rule: ConflictRule)?

        static func == (a: Decision, b: Decision) -> Bool {
            a.outcome == b.outcome && a.conflict?.winner == b.conflict?.winner && a.conflict?.rule == b.conflict?.rule
        }
    }

    package typealias Winner = ConflictWinner

    /// What the resolver made of two values.
    private enum Join {
        case merged([UInt8])
        /// The merge is over `maxValueSize`: a value `set` refuses and the peer would refuse.
        case tooLarge
        /// The resolver threw (a value it cannot decode).
        case failed
    }

    private static func join(_ resolver: (_ older: [UInt8], _ newer: [UInt8]) throws -> [UInt8],
                             _ older: [UInt8], _ newer: [UInt8], maxValueSize: Int) -> Join {
        guard let merged = try? resolver(older, newer) else { return .failed }
        return merged.count > maxValueSize ? .tooLarge : .merged(merged)
    }

    /// `maxValueSize` bounds a merge as `set` bounds a value: a larger merge
    /// is not kept, the two writes resolve by last writer wins instead.
    static func decide(local: EntryState?, incoming: EntryState,
                       resolver: ((_ older: [UInt8], _ newer: [UInt8]) throws -> [UInt8])?, maxValueSize: Int) -> Decision {
        guard let local else { return Decision(outcome: .take) }
        let base = max(local.base, incoming.base)
        if incoming.version == local.version {
            if incoming.deleted == local.deleted && incoming.value == local.value { return Decision(outcome: .ignore) }
            // Only merges give one version two values; join them again (unless that is too large:
            // then the tie-break below, the same on both devices).
            if let resolver, let a = local.value, let b = incoming.value,
               case .merged(let merged) = a.lexicographicallyPrecedes(b) ? join(resolver, a, b, maxValueSize: maxValueSize)
                                                                          : join(resolver, b, a, maxValueSize: maxValueSize) {
                return merged == local.value ? Decision(outcome: .ignore) : Decision(outcome: .merged(value: merged, version: local.version, base: base))
            }
            if incoming.deleted && !local.deleted { return Decision(outcome: .take) }
            if !incoming.deleted && local.deleted { return Decision(outcome: .ignore) }
            let takeIncoming = (incoming.value ?? []).lexicographicallyPrecedes(local.value ?? []) == false
            return Decision(outcome: takeIncoming ? .take : .ignore)
        }
        if incoming.version < local.version {
            if local.base >= incoming.version { return Decision(outcome: .ignore) }
            if let resolver, let older = incoming.value, let newer = local.value, !incoming.deleted, !local.deleted {
                switch join(resolver, older, newer, maxValueSize: maxValueSize) {
                case .merged(let merged):
                    if merged == local.value { return Decision(outcome: .ignore, conflict: (.local, .resolver)) }
                    return Decision(outcome: .merged(value: merged, version: local.version, base: base), conflict: (.merged, .resolver))
                case .tooLarge:
                    return Decision(outcome: .ignore, conflict: (.local, .mergeTooLarge))
                case .failed:
                    break
                }
            }
            return Decision(outcome: .ignore, conflict: (.local, .lastWriterWins))
        }
        if incoming.base >= local.version { return Decision(outcome: .take) }
        if let resolver, let older = local.value, let newer = incoming.value, !incoming.deleted, !local.deleted {
            switch join(resolver, older, newer, maxValueSize: maxValueSize) {
            case .merged(let merged):
                if merged == incoming.value { return Decision(outcome: .take, conflict: (.remote, .resolver)) }
                return Decision(outcome: .merged(value: merged, version: incoming.version, base: base), conflict: (.merged, .resolver))
            case .tooLarge:
                return Decision(outcome: .take, conflict: (.remote, .mergeTooLarge))
            case .failed:
                break
            }
        }
        return Decision(outcome: .take, conflict: (.remote, .lastWriterWins))
    }
}

/// Which write a resolved conflict kept.
public enum ConflictWinner: String, Sendable, Codable, CustomStringConvertible {
    /// The value this device had.
    case local
    /// The value that arrived from the peer.
    case remote
    /// Neither alone: the key's resolver merged them.
    case merged

    public var description: String { rawValue }
}

/// How a conflict was resolved.
public enum ConflictRule: String, Sendable, Codable, CustomStringConvertible {
    /// The later version by HLC (time, counter, node id) won.
    case lastWriterWins = "last-writer-wins"
    /// The key's resolver merged the two values.
    case resolver
    /// The resolver's merge was larger than the store's `maxValueSize` (a
    /// value `set` refuses): it was dropped and the later version won, as
    /// by `lastWriterWins`; the earlier write's value is lost.
    case mergeTooLarge = "merge-too-large"

    public var description: String { rawValue }
}

import SyncTransport

/// What a session decided for each entry of one batch from the peer, before
/// the store executes it (`ReplicationPort.apply`): pure data, in arrival order.
package struct ApplyPlan: Sendable, Equatable {
    /// One incoming entry and what becomes of it.
    package struct Step: Sendable, Equatable {
        package var entry: WireEntry
        package var verdict: Verdict
        /// The declaration the planner found for the entry's key (nil when
        /// refused), so that executing the step need not look it up again.
        var registered: KeyRegistry.Registered?
    }

    /// Two concurrent writes met; who won and by which rule (`last-writer-wins`, `resolver` or `merge-too-large`).
    package struct Conflict: Sendable, Equatable {
        package var local: HLCTimestamp
        package var winner: MergeRule.Winner
        package var rule: ConflictRule
    }

    package enum Verdict: Sendable, Equatable {
        /// Never stored: `code` goes back to the peer in the acknowledgement.
        case refuse(code: String, versionRefusal: VersionRefusal?)
        /// The local version stays (a duplicate, or an older or losing write).
        case ignore(Conflict?)
        /// The incoming entry replaces the local one.
        case take(Conflict?)
        /// A resolver joined the two values: stored at `version` (new information for the peer too), with
        /// `base` the later of the two writes' bases (what the join has seen: its inputs, not all before `version`).
        case merge(value: [UInt8], version: HLCTimestamp, base: HLCTimestamp, Conflict?)

        package var conflict: Conflict? {
            switch self {
            case .refuse: nil
            case .ignore(let c), .take(let c), .merge(_, _, _, let c): c
            }
        }

        package var changesStore: Bool {
            switch self {
            case .take, .merge: true
            case .refuse, .ignore: false
            }
        }
    }

    package var steps: [Step] = []

    package init(steps: [Step] = []) { self.steps = steps }

    /// Entries that change the store (taken or merged).
    package var applied: Int { steps.count { $0.verdict.changesStore } }
    package var ignored: Int { steps.count { if case .ignore = $0.verdict { true } else { false } } }
    /// The refusals, as the acknowledgement carries them.
    package var rejected: [SyncMessage.Rejection] {
        steps.compactMap { step in
            if case .refuse(let code, _) = step.verdict { SyncMessage.Rejection(key: step.entry.key, code: code) } else { nil }
        }
    }
    package var versionRefusals: [VersionRefusal] {
        steps.compactMap { if case .refuse(_, let refusal?) = $0.verdict { refusal } else { nil } }
    }
    /// The entries the store must see (every one that was not refused): their versions move its clock.
    package var observed: [WireEntry] {
        steps.compactMap { if case .refuse = $0.verdict { nil } else { $0.entry } }
    }
}

/// The accept / refuse / merge decision for entries from the peer, pure: the
/// same inputs give the same plan, with no store, clock or I/O involved.
package enum ApplyPlanner {
    /// Who sent the batch and the bounds an entry must respect.
    package struct Context: Sendable {
        package var peerRole: DeviceRole
        /// Declaration names the peer declares differently: refused.
        package var mismatched: Set<String>
        /// The largest packed version accepted (`SyncStore.versionBound`).
        package var versionBound: Int64
        package var now: Int64
        package var maxValueSize: Int
        /// Deliberate fault (`TestingFaults.lastArrivalWins`): any differing version replaces the local one.
        package var lastArrivalWins = false

        package init(peerRole: DeviceRole, mismatched: Set<String>, versionBound: Int64, now: Int64, maxValueSize: Int,
                     lastArrivalWins: Bool = false) {
            self.peerRole = peerRole
            self.mismatched = mismatched
            self.versionBound = versionBound
            self.now = now
            self.maxValueSize = maxValueSize
            self.lastArrivalWins = lastArrivalWins
        }
    }

    /// Decides every entry in order, each seeing the ones before it (a key may
    /// come twice): policies first (what the peer may not send is refused),
    /// then the version bound, then the merge rule against `local` (the stored
    /// state of the entries' keys, values decrypted).
    package static func plan(_ entries: [WireEntry], local: [String: EntryState], registry: KeyRegistry,
                             context: Context) -> ApplyPlan {
        var plan = ApplyPlan()
        plan.steps.reserveCapacity(entries.count)
        var current = local
        // Room for every key of the batch: no rehashing while it grows.
        current.reserveCapacity(local.count + entries.count)
        var lookups = KeyRegistry.FamilyLookupMemo()
        for incoming in entries {
            func refuse(_ code: String, _ refusal: VersionRefusal? = nil) {
                plan.steps.append(.init(entry: incoming, verdict: .refuse(code: code, versionRefusal: refusal)))
            }
            if KeyName.containsNUL(incoming.key) {
                refuse(SyncError.Code.invalidKey.rawValue)
                continue
            }
            guard let registered = registry.registered(forEntry: incoming.key, memo: &lookups) else {
                refuse(SyncError.Code.unknownKey.rawValue)
                continue
            }
            let descriptor = registered.descriptor
            if !context.mismatched.isEmpty && context.mismatched.contains(descriptor.name) {
                refuse(SyncError.Code.keyDeclarationMismatch.rawValue)
                continue
            }
            guard descriptor.replicates(from: context.peerRole), descriptor.encoding == incoming.encoding else {
                refuse(policyViolation)
                continue
            }
            if (incoming.value?.count ?? 0) > context.maxValueSize, !holds(current[incoming.key], orNewerThan: incoming, context: context) {
                refuse(SyncError.Code.valueTooLarge.rawValue)
                continue
            }
            if let refusal = SyncStore.versionRefusal(incoming, bound: context.versionBound, now: context.now) {
                refuse(SyncError.Code.versionOutOfRange.rawValue, refusal)
                continue
            }
            // One hash lookup reads the state the entry meets and records the one it leaves.
            decide(incoming, registered: registered, against: &current[incoming.key], context: context, into: &plan)
        }
        return plan
    }

    /// The merge rule's step for an entry that passed the checks: `state` is
    /// what it meets (stored, or left by an entry before it in the batch), and
    /// becomes what it leaves.
    ///
    /// A stored version past `context.versionBound` (written while this
    /// device's clock ran ahead, and refused by every peer whose clock is
    /// right) is met as no version: an entry within the bound replaces it.
    /// Else the peer's writes would lose to it until the clock reaches it,
    /// while the peer, which never took it, keeps its own: the two would differ for good.
    private static func decide(_ incoming: WireEntry, registered: KeyRegistry.Registered, against state: inout EntryState?,
                               context: Context, into plan: inout ApplyPlan) {
        let localState = state.flatMap { $0.version.packed > context.versionBound ? nil : $0 }
        var decision = MergeRule.decide(local: localState, incoming: incoming.state, resolver: registered.resolver?.merge,
                                          maxValueSize: context.maxValueSize)
        if context.lastArrivalWins, let localState, localState.version != incoming.version {
            decision = MergeRule.Decision(outcome: .take)
        }
        let conflict = decision.conflict.flatMap { c in localState.map { ApplyPlan.Conflict(local: $0.version, winner: c.winner, rule: c.rule) } }
        switch decision.outcome {
        case .ignore:
            plan.steps.append(.init(entry: incoming, verdict: .ignore(conflict), registered: registered))
        case .take:
            plan.steps.append(.init(entry: incoming, verdict: .take(conflict), registered: registered))
            state = incoming.state
        case .merged(let value, let version, let base):
            plan.steps.append(.init(entry: incoming, verdict: .merge(value: value, version: version, base: base, conflict),
                                    registered: registered))
            state = EntryState(version: version, base: base, deleted: false, value: value)
        }
    }

    /// Whether `state` (stored, within the version bound) is `incoming`
    /// itself or newer: then an entry over `maxValueSize` is a value this
    /// store took before its limit shrank (a duplicate, a re-baseline), or
    /// one it holds a newer write over, and the merge rule ignores it instead
    /// of refusing it.
    private static func holds(_ state: EntryState?, orNewerThan incoming: WireEntry, context: Context) -> Bool {
        guard let state, state.version.packed <= context.versionBound else { return false }
        return state.version > incoming.version
            || state.version == incoming.version && state.deleted == incoming.deleted && state.value == incoming.value
    }

    /// The refusal code of an entry whose key the peer may not send (or sent with another encoding).
    package static let policyViolation = "policy-violation"
}

/// What the store did with a plan.
package struct ApplyOutcome: Sendable {
    /// Conflicts newly written to the conflict log (a duplicated delivery of the same pair is not logged again).
    package var conflicts: [ConflictRecord] = []
    /// The committed changes, as observers saw them.
    package var changes: [StoreChange] = []
    /// Resolver merges over the automatic limit that wait for the next `sync()` (reported as deferred).
    package var deferred: [(key: String, size: Int)] = []
    /// The peer's cursor moved past the changes this apply added to the
    /// stream, to this position, in its transaction (`ReplicationPort.apply`'s `passingOver`).
    package var passedOverThrough: Int64?

    package init(conflicts: [ConflictRecord] = [], changes: [StoreChange] = []) {
        self.conflicts = conflicts
        self.changes = changes
    }
}

import Logging
import SyncTransport

/// Queued delivery through a `Mailbox`, step-driven like `ReplicationEndpoint`:
/// each `exchange` reads what the peer queued (applying batches through the
/// same `ApplyPlanner` and port as a live session, acknowledging them durably),
/// then posts this store's changes after what is already posted.
///
/// The peer's cursor is the truth of what is pending: posting starts after it
/// (or after what waits in the outbox), an acknowledgement moves it only when
/// its range starts at or before it, and when the outbox is empty while the
/// cursor lags (a message was refused or lost) posting starts over from the
/// cursor. Applying is idempotent by version: a message delivered twice
/// applies nothing the second time.
///
/// Not thread-safe: one task (or lock) owns it.
package final class MailboxReplicator {
    package let port: any ReplicationPort
    package let reporter: any ReplicationReporter
    package let configuration: ReplicationConfiguration
    package let mailbox: Mailbox
    /// The peer's node, once known (from the store, or its first message).
    package private(set) var peerNode: UInt32?
    /// The stream position posted through (nil: not decided since start).
    private var postedThrough: Int64?
    /// The re-baseline generation `postedThrough` was posted in.
    private var postedGeneration: Int64?
    /// The watch and generation whose superseded batches were last taken back (`withdrawSuperseded`).
    private var checkedGeneration: (node: UInt32, generation: Int64)?
    /// The peer `postedThrough` was posted for (`unknownPeer` before it is known).
    private var postedFor: UInt32?
    /// The store's purged-through version when posting for `unknownPeer` began at 0 (nil: not in this process).
    private var purgedWhenUnknownStreamBegan: Int64?
    /// Set when the peer refused our messages: posting pauses for
    /// `probeInterval` (the peer may be updated meanwhile), or, for another key
    /// registry, until the registries are compared (live, or by the
    /// declarations the refusing peer posts), whichever comes first.
    package private(set) var stalled: SyncError?
    /// The peer's `PeerRecord.registries` when it refused our registry.
    private var stalledRegistries: [UInt8]??
    /// When (store clock, ms) posting goes on after a refusal (at once if the clock is set back before it began).
    private var stalledUntil: Int64 = 0
    /// The registries (ours, then the peer's) our declarations were last posted for.
    private var declarationsPostedFor: [UInt8]?
    /// The registries after whose comparison a refusal of our registry was taken as
    /// older than the comparison, and posting went on at once (a second one pauses it).
    private var retriedRegistries: [UInt8]?
    /// A batch was posted since that retry: only a refusal read after it may be of
    /// something posted after the comparison (refusals read before are of older messages).
    private var postedSinceRetry = false
    /// Keys the peer declares differently (from the last comparison), passed over while posting.
    private var mismatchedForPeer: Set<String> = []
    /// The repair batch was posted and its acknowledgement has not come yet.
    private var repairPosted = false
    /// When (store clock, ms) our declarations last went to a peer that declares
    /// keys differently, to learn whether it still does; nil: not in this process.
    private var lastProbe: Int64?
    /// The node this mailbox's peer named when the store refused it (`maxKnownPeers`).
    var refusedForLimit: UInt32?

    /// How often at most a peer that declares keys differently is asked again (our declarations, which it answers
    /// with its own) while nothing is in flight, and how long posting pauses after a refusal: an answer lost, or an
    /// update with nothing to send, would otherwise leave those keys waiting until a live session.
    static let probeInterval: Int64 = 60_000

    /// The stretch a repair batch names: past any stream position, so that its acknowledgement never moves the cursor and is known by it.
    static let repairRange = (after: Int64.max - 1, through: Int64.max)
    /// Called with each message this end posts (the simulator's invariant checker reads them).
    package var onPost: ((QueuedMessage) -> Void)?
    /// Called with each valid message read, before it is used (tests interleave a live session there).
    package var afterReading: ((QueuedMessage) -> Void)?
    /// Whether the last round failed to post because the peer's spool was full (reported once).
    private var reportedFull = false
    /// On a watch: this process posted its node renewal notice (`announceNodeRenewal`).
    var announcedNodeRenewal = false
    /// On a phone: the node ids this process refused through this mailbox for being another pairing's.
    var refusedTakenNodes: Set<UInt32> = []
    /// The node ids other mailboxes' messages named in this process (set by `SyncPeer`), the one this one's named, those told of.
    var nodesOfOtherMailboxes: Set<UInt32> = []
    private(set) var learnedPeerNode: UInt32?
    var toldSharedNodes: Set<UInt32> = []
    /// What this end learnt of other writers of its role in its outbox (`MailboxReplicator+SameRole`).
    var sameRole = SameRoleOutbox()
    /// A re-baseline notice was posted ahead of the baseline now being posted (from cursor 0).
    private var rebaselinePosted = false
    /// A queued notice's baseline owes its caught-up marker (nil: not read from the store yet).
    private var owesCaughtUp: Bool?
    /// Messages one round reads at most (then it posts; the rest waits): by default what a full spool holds.
    package lazy var maxMessagesPerRound = Self.defaultMessagesPerRound(mailbox.limits)

    package init(port: any ReplicationPort, reporter: any ReplicationReporter, configuration: ReplicationConfiguration, mailbox: Mailbox) {
        self.port = port
        self.reporter = reporter
        self.configuration = configuration
        self.mailbox = mailbox
        port.registerQueuedSpool(mailbox)
    }

    /// What this end's messages carry. The protocol version is the oldest this
    /// end speaks: the queued format (payload schema 1) is the same in
    /// protocols 1 to 3, so a build of any of them reads it, and a build that
    /// speaks only older protocols than ours refuses it.
    var header: QueuedHeader {
        QueuedHeader(protocolVersion: configuration.protocolRange.lowerBound, node: port.nodeID, role: port.role,
                     pairingEpoch: configuration.pairingEpoch, registryFingerprint: ourFingerprint)
    }

    /// One round: reads and applies (or acknowledges) everything the peer
    /// queued, then, when `sendsPending`, posts what is pending for it.
    /// Never throws: failures are reported as `.error` events and in the report.
    package func exchange(sendsPending: Bool) -> QueuedDeliveryReport {
        exchange { _ in sendsPending }
    }

    /// One round that posts when `sendsPending` answers true for the peer's
    /// node (nil: not known yet), asked after what the peer queued was read.
    package func exchange(sendsPending: (_ peerNode: UInt32?) -> Bool) -> QueuedDeliveryReport {
        var report = QueuedDeliveryReport()
        do {
            if peerNode == nil { peerNode = try initialPeerNode() }
            port.retryDeferredWork()
            try port.whileQueuedPosting { try withdrawSuperseded() }
            let outboxWasEmpty = try mailbox.outgoingCount() == 0
            try noticeWritersOfThisRole()  // before posting: a spool no one reads fills, and posting then throws
            try announceNodeRenewal(into: &report)
            try receive(into: &report)
            // While no live re-baseline notice takes batches back (`QueuedSpools`).
            if sendsPending(peerNode) { try port.whileQueuedPosting { try post(outboxWasEmpty: outboxWasEmpty, into: &report) } }
        } catch let error as SyncError {
            report.failure = error
            emit(.error(error))
        } catch let error as TransportError {
            if error.code == .mailboxFull {
                report.failure = SyncError(error, context: "queued delivery waits for the peer to read")
                if !reportedFull { emit(.error(report.failure!)) }
                reportedFull = true
            } else {
                report.failure = SyncError(error, context: "queued delivery")
                emit(.error(report.failure!))
            }
        } catch {
            report.failure = SyncError(.mailboxIO, "queued delivery: \(error)")
            emit(.error(report.failure!))
        }
        return report
    }

    // MARK: receiving

    private func receive(into report: inout QueuedDeliveryReport) throws {
        var taken = 0
        reading: while true {
            // At most `maxMessagesPerRound`: a peer posting as fast as this end reads would keep the round from posting.
            guard taken < maxMessagesPerRound else { return }  // the rest (and the sweep below) waits for the next round
            taken += 1
            // A live re-baseline notice acted on after this, before a batch read now is applied: the
            // batch may be one the notice superseded (the phone took it back before the notice went).
            let rebaselinesBefore = port.liveRebaselineCount
            guard let delivery = try mailbox.next() else { break }
            switch delivery {
            case .refused(let file, let error):
                let refusal = SyncError(error, context: "the mailbox refused \(file) (kept in \(mailbox.inboxPath)/refused)")
                report.refused.append(refusal)
                emit(.error(refusal))
            case .message(let message):
                report.messagesRead += 1
                let decoded: QueuedMessage
                do {
                    decoded = try QueuedMessage(frame: message.frame)
                } catch let error as SyncError {
                    try setAside(message, error, into: &report)
                    continue
                }
                // Before the registry is compared (a refusal for it would pause the watch's posting,
                // and its declarations would be taken unused): the watch takes a new node id first.
                if try refusesTakenNodeID(decoded.header, into: &report) {
                    try mailbox.accept(message)
                    continue
                }
                if let problem = try validate(decoded) {
                    try setAside(message, problem, into: &report)
                    // Another registry that no session compared with ours: our declarations go to
                    // the peer, which compares them and answers with its own (`.declarations`).
                    // Each time: a copy the peer lost would otherwise never come again.
                    if problem.code == .keyDeclarationMismatch { try offerDeclarations(to: decoded.header, into: &report, again: true) }
                    continue
                }
                if decoded.isFromPhoneOnly, port.role != .watch {
                    try setAside(message, SyncError(.protocolViolation, "a queued \(decoded.kindName) reached a \(port.role); only a phone sends them to its watches"),
                                 into: &report)
                    continue
                }
                if decoded.isFromWatchOnly, port.role != .phone {
                    try setAside(message, SyncError(.protocolViolation, "a queued \(decoded.kindName) reached a \(port.role); only a watch sends them to its phone"),
                                 into: &report)
                    continue
                }
                afterReading?(decoded)
                // Before the sender is learnt: it does not move the node id's pairing.
                if try takesNodeRenewalNotice(decoded) {
                    try mailbox.accept(message)
                    continue
                }
                var peer: PeerRecord
                do {
                    peer = try learn(decoded.header)
                } catch let error as SyncError where error.code == .tooManyPeers {
                    refusedForLimit = decoded.header.node
                    try setAside(message, error, into: &report)
                    continue
                }
                if decoded.header.registryFingerprint == ourFingerprint, peer.registries != agreed, !isRefusal(decoded) {
                    // Written with our registry: the two agree now (the other app was updated too), on
                    // stable storage so that nothing is passed over after a restart; what was passed
                    // over for keys it once declared differently goes in a repair batch (`post`).
                    try port.recordRegistries(agreed, for: peer.node)
                    peer.registries = agreed
                }
                switch decoded {
                case .batch(let sender, let after, let through, let entries):
                    // Posted before a live re-baseline notice the phone sent since: its baseline brought
                    // what of the batch still holds, and applied now the batch could bring back a value
                    // whose delete was purged. Taken, neither applied nor acknowledged.
                    if try postedBeforeALiveRebaseline(through, from: peer.node) { break }
                    // Another registry, compared already (`validate`): its keys declared differently are passed over.
                    let mismatched = sender.registryFingerprint == ourFingerprint ? [] : peer.mismatched
                    guard let plan = try apply(entries, from: peer, mismatched: mismatched, unlessRebaselinedSince: rebaselinesBefore, bytes: message.frame.payload.count) else {
                        // Left in the mailbox: the next round reads it again, unless the phone took it back.
                        report.messagesRead -= 1
                        break reading
                    }
                    report.entriesApplied += plan.applied
                    // Live sessions forward them (and send back a resolver's merge); waits for idle see them.
                    if plan.applied > 0 { port.noteAppliedOutsideSessions() }
                    // Acknowledged before the message is taken: if this process dies in between,
                    // the batch comes again, applies nothing, and is acknowledged again.
                    try postAcknowledgement(after: after, through: through, of: plan, into: &report)  // bounded to fit a message
                case .ack(_, let after, let through, _, _) where (after, through) == Self.repairRange:
                    // The repair batch is applied: the keys declared differently agree, nothing of them
                    // waits (unless the registries were compared apart again since).
                    if peer.registries == agreed { try port.setMismatchedKeys([], for: peer.node) }
                    repairPosted = false
                case .ack(_, let codedAfter, let codedThrough, _, let rejected):
                    let cursor = try mailboxPeer()?.cursor ?? 0
                    // Of a batch posted before a re-baseline notice (another generation): it moves no cursor.
                    let generation = try port.rebaselineGeneration(for: peer.node)
                    if let after = QueuedStreamPosition.position(codedAfter, generation: generation),
                       let through = QueuedStreamPosition.position(codedThrough, generation: generation),
                       after <= cursor, through > cursor, try acknowledgesOnlyWhatWasWritten(through) {
                        try port.acknowledge(peer: peer.node, through: through)
                        // On stable storage before the ack is taken (re-baselines read it; a phone's lost: posted again).
                        try port.syncCommitted()
                        report.acknowledged = true
                    }
                    // Entries the peer took for keys it declares differently (a batch posted before the two
                    // compared registries) wait as those keys' changes do: sent once the registries agree.
                    let waiting = Set(rejected.filter { $0.code == SyncError.Code.keyDeclarationMismatch.rawValue }
                        .compactMap { port.registry.descriptor(forEntry: $0.key)?.name })
                    if !waiting.isSubset(of: peer.mismatched) {
                        try port.setMismatchedKeys(peer.mismatched.union(waiting), for: peer.node)
                    }
                    if !rejected.isEmpty {
                        emit(.error(SyncError.refusedByPeer(rejected)))
                    }
                case .refusal(let refuser, let code, let text):
                    let error = SyncError(SyncError.Code(PeerText.escaped(code, maxLength: 64)),
                                          "the peer refused our queued messages: \(PeerText.escaped(text))")
                    if try renewsNodeID(after: error, text: text, into: &report) { break }
                    // Refused for our registry although we compared the two since (live, or by declarations):
                    // the peer had not when it refused (it refused before our declarations came, or they were lost).
                    let comparedSince = error.code == .keyDeclarationMismatch
                        && peer.registries == ourFingerprint + refuser.registryFingerprint
                    if error.code == .keyDeclarationMismatch, refuser.registryFingerprint == ourFingerprint {
                        // The peer's registry is ours now: what it refused was written with our older
                        // registry (this app was updated since), and what follows is taken.
                    } else if comparedSince, retriedRegistries != peer.registries {
                        // Ours go again, and what it refused, once.
                        retriedRegistries = peer.registries
                        postedSinceRetry = false
                        try offerDeclarations(to: refuser, into: &report, again: true)
                    } else if comparedSince, !postedSinceRetry {
                        // Another refusal of a message posted before the comparison (the peer refused several
                        // in one pass): the retry already covers it.
                    } else {
                        stalled = error
                        stalledRegistries = .some(peer.registries)
                        stalledUntil = port.nowMilliseconds() + Self.probeInterval
                    }
                    report.refused.append(error)
                    emit(.error(error))
                case .declarations(let sender, let lines, let isAnswer):
                    // What a live session's hellos do: compare, remember, and let the peer compare too.
                    let ours = port.registry.wireDeclarations(from: port.role)
                    let mismatched = ReplicationSession.mismatchedKeys(ours, lines)
                    let mismatchedHere = ReplicationSession.declared(mismatched, in: ours)
                    if !mismatchedHere.isSubset(of: peer.mismatched) {
                        try port.setMismatchedKeys(peer.mismatched.union(mismatchedHere), for: peer.node)
                    }
                    let registries = ourFingerprint + sender.registryFingerprint
                    if peer.registries != registries {
                        try port.recordRegistries(registries, for: peer.node)
                        if !mismatched.isEmpty { emit(.keyMismatch(keys: ReplicationEndpoint.reportedMismatches(mismatched, ours: ours))) }
                    }
                    try port.syncCommitted()  // before they are taken: lost, the peer would refuse again, a pause each
                    // An offer is answered, whatever we knew: the peer compares too, and learns
                    // whether our registry is still the one it has (an answer is never answered).
                    if !isAnswer { try offerDeclarations(to: sender, into: &report, again: true, asAnswer: true) }
                case .rebaseline(_, let purgedThrough):
                    // On stable storage before the notice is taken: a notice lost to a power cut
                    // after `accept` would leave the purged deletes undone here for good. Marked:
                    // what the baseline posted after it does not bring back goes at the phone's
                    // caught-up marker (announced ahead of the notice), or, from a phone of a build
                    // before markers, when the read ends (below; or at the next one's end).
                    _ = try port.applyRebaseline(purgedThrough: purgedThrough, from: peer.node, mismatched: [], acknowledgedBefore: nil,
                                                 generation: nil, removal: .afterQueuedRead)
                    try port.syncCommitted()
                case .caughtUpFollows:
                    // The baseline after the notice that follows ends with a caught-up marker: what the
                    // notice marks stays until it comes, however many reads the baseline takes.
                    try port.expectQueuedCaughtUp()
                case .caughtUp:
                    // Everything the phone had for this watch came ahead of the marker: what is still marked goes.
                    if try port.sweepRebaselineMarks(after: .queuedCaughtUp) > 0 { port.noteAppliedOutsideSessions() }
                    // On stable storage before the marker is taken: a removal lost to a power cut would never come again.
                    try port.syncCommitted()
                case .renewsNodeID:
                    break  // taken above (`takesNodeRenewalNotice`)
                }
                try mailbox.accept(message)
            }
        }
        // From a phone that posts no caught-up markers: the queued notice's baseline came in this read
        // (the phone posted it after the notice), and what it did not bring back goes.
        if port.role == .watch, try port.sweepRebaselineMarks(after: .queuedRead) > 0 { port.noteAppliedOutsideSessions() }
    }

    /// This app's registry fingerprint, as its messages carry it.
    lazy var ourFingerprint: [UInt8] = port.registry.fingerprint(for: port.role)
    /// `PeerRecord.registries` of a peer whose registry is ours.
    private var agreed: [UInt8] { ourFingerprint + ourFingerprint }

    private func isRefusal(_ message: QueuedMessage) -> Bool { if case .refusal = message { true } else { false } }

    /// Posts this device's key declarations for the peer that wrote `header`,
    /// once per pair of registries (the peer answers a new comparison with its own).
    private func offerDeclarations(to header: QueuedHeader, into report: inout QueuedDeliveryReport, again: Bool = false,
                                   asAnswer: Bool = false) throws {
        try offerDeclarations(toRegistry: header.registryFingerprint, into: &report, again: again, asAnswer: asAnswer)
    }

    private func offerDeclarations(toRegistry peerFingerprint: [UInt8], into report: inout QueuedDeliveryReport, again: Bool = false,
                                   asAnswer: Bool = false) throws {
        let registries = ourFingerprint + peerFingerprint
        guard again || declarationsPostedFor != registries else { return }
        let message = QueuedMessage.declarations(self.header, port.registry.wireDeclarations(from: port.role), isAnswer: asAnswer)
        try postOwn(message.frame(), reserve: true)
        onPost?(message)
        report.messagesPosted += 1
        declarationsPostedFor = registries
    }

    /// The peer a valid message came from, recorded (a new node, or the first message, starts its cursor over).
    /// A node the store refuses (`.tooManyPeers`) leaves what this end knows of its peer as it was.
    private func learn(_ header: QueuedHeader) throws -> PeerRecord {
        let record: PeerRecord
        if let known = try knownSender(header) {
            record = known
        } else {
            record = try port.recordPeer(node: header.node, role: header.role, epoch: header.pairingEpoch)
            // What this end posted before it knew the node was for this watch (one watch per mailbox).
            if record.cursor == 0 { try port.adoptRebaselineGeneration(for: header.node) }
        }
        if header.node != peerNode {
            postedThrough = nil
            rebaselinePosted = false
        }
        (peerNode, learnedPeerNode) = (header.node, header.node)
        return record
    }

    // MARK: posting

    /// On a phone: takes back the batches for the watch that it has not read
    /// and that a re-baseline notice (live, or queued ahead of them)
    /// superseded, batches of an earlier generation. Applied after a live
    /// notice, one could bring back a value whose delete the phone purged;
    /// the baseline after the notice brings what is alive. A live notice
    /// takes them back before it goes (`QueuedSpools`) from the mailboxes
    /// registered in this process; this round covers the rest (what an
    /// earlier process posted, before this one first used the mailbox).
    private func withdrawSuperseded() throws {
        guard port.role == .phone,
              let record = try mailboxPeer() else { return }
        let generation = try port.rebaselineGeneration(for: record.node)
        if let checked = checkedGeneration, checked == (record.node, generation) { return }
        try Self.withdraw(from: mailbox, batchesOf: port.nodeID, outside: generation)
        checkedGeneration = (record.node, generation)
    }

    /// Stands for a peer not met yet: nothing in the store came from it, and it has no cursor.
    static let unknownPeer = UInt32.max

    private func post(outboxWasEmpty: Bool, into report: inout QueuedDeliveryReport) throws {
        // A peer not met yet gets everything (its cursor is 0); its first acknowledgement records it.
        let record = try mailboxPeer()
            .flatMap { known in peerNode == nil || peerNode == known.node ? known : nil }
        if record == nil, try waitsForAPlace() { return }
        // This app's registry changed since the two were compared (it was updated): the peer
        // learns it from our declarations, and answers with its own (both compare again).
        if let registries = record?.registries, registries.count > ourFingerprint.count,
           Array(registries.prefix(ourFingerprint.count)) != ourFingerprint {
            try offerDeclarations(toRegistry: Array(registries.dropFirst(ourFingerprint.count)), into: &report)
        }
        // Keys the peer declares differently, and nothing in flight: ask again now and then whether it still does.
        let agree = record?.registries == agreed
        if let record, !record.mismatched.isEmpty, !agree, outboxWasEmpty,
           let registries = record.registries, registries.count > ourFingerprint.count {
            let now = port.nowMilliseconds()
            let since = lastProbe ?? now  // the first a whole interval after this process began to wait
            lastProbe = since
            if now - since >= Self.probeInterval {
                lastProbe = now
                try offerDeclarations(toRegistry: Array(registries.dropFirst(ourFingerprint.count)), into: &report, again: true)
            }
        }
        if let refusal = stalled {
            // Refused for our registry: the two were compared since (live, or by declarations), and the peer
            // now takes what we post of the keys declared alike. Anything else waits out the pause (the
            // peer's app may be updated meanwhile; a peer that still refuses costs one message a pause).
            let compared = refusal.code == .keyDeclarationMismatch && record?.registries != nil
                && (stalledRegistries.map { $0 != record?.registries } ?? true)
            guard compared || !(1...Self.probeInterval).contains(stalledUntil &- port.nowMilliseconds()) else { return }  // over, or clock set back
            stalled = nil
            stalledRegistries = nil
        }
        // Once the registries agree again nothing is passed over; what was, goes in one repair batch.
        mismatchedForPeer = agree ? [] : record?.mismatched ?? []
        // A lane pass a full disk put off may hold stream changes for `sync()`: none go until it ran.
        if port.defersWork { if let record { peerNode = record.node }; return }
        if agree, let record, !record.mismatched.isEmpty, !repairPosted || outboxWasEmpty {
            try postRepair(record, into: &report)
        }
        if let record { peerNode = record.node }
        let node = record?.node ?? Self.unknownPeer
        var cursor = record?.cursor ?? 0
        var generation = try port.rebaselineGeneration(for: node)
        if postedGeneration != generation || postedFor != node {
            // A re-baseline notice went (live, or by an earlier round), or the peer changed (the
            // phone forgot the watch, or met it): what was posted before does not count.
            postedThrough = nil
            postedGeneration = generation
            if postedFor != node {
                rebaselinePosted = false
                purgedWhenUnknownStreamBegan = nil
            }
            postedFor = node
        }
        if postedThrough == nil, node != Self.unknownPeer {
            // After a restart: what still waits in the outbox was posted already. (Not for a
            // peer not known: what waits may be for a watch the phone has forgotten since, posted
            // before the notice that is now due; the new baseline goes after it.)
            postedThrough = try mailbox.outgoingMessages().compactMap { message -> Int64? in
                guard case .batch(let header, _, let through, _)? = try? QueuedMessage(frame: message.frame),
                      header.node == port.nodeID, through != Self.repairRange.through else { return nil }
                return QueuedStreamPosition.position(through, generation: generation)
            }.max()
        }
        var posted = max(postedThrough ?? cursor, cursor)
        if outboxWasEmpty, posted > cursor {
            // Everything posted was taken and its acknowledgements read, yet the cursor lags:
            // some were refused or lost. Post again from the cursor (applying twice changes nothing).
            posted = cursor
            rebaselinePosted = false
        }
        if node == Self.unknownPeer {
            // No purge waits for a watch the phone does not know (not met yet, or forgotten): when
            // tombstones were purged since its stream began, what was posted may hold values whose
            // deletes are gone. A notice goes after it, with a new baseline.
            let purged = try port.purgedThrough()
            if posted > 0, purged > purgedWhenUnknownStreamBegan ?? 0 {
                posted = 0
                rebaselinePosted = false
            }
            if posted == 0 { purgedWhenUnknownStreamBegan = purged }
        }
        postedThrough = posted
        let owesLiveCaughtUp = try node != Self.unknownPeer && port.owesLiveCaughtUp(to: node)
        if posted == 0, !rebaselinePosted,
           let purged = try port.rebaselineNotice(for: node, cursor: cursor, queuedIn: configuration.pairingEpoch) {
            // A watch the phone has no cursor for, after tombstones were purged (a forgotten
            // watch returning through the mailbox): the notice goes ahead of its baseline, and
            // the mailbox delivers in order. Applying it twice removes nothing the baseline brought.
            // Announced first: the baseline ends with a caught-up marker (below), so the watch
            // keeps what the notice marks until all of the baseline came.
            owesCaughtUp = true
            // After a live notice whose caught-up the watch never acknowledged, announced again after
            // this one: a watch that acted on the live notice passes this one over (and with it the
            // announcement before it), and this baseline's marker ends both (it is the newer one).
            let again = owesLiveCaughtUp ? [QueuedMessage.caughtUpFollows(header)] : []
            for message in [QueuedMessage.caughtUpFollows(header), .rebaseline(header, purgedThrough: purged)] + again {
                try postOwn(message.frame())
                onPost?(message)
                report.messagesPosted += 1
            }
            rebaselinePosted = true
            generation = try port.rebaselineGeneration(for: node)
            postedGeneration = generation
        } else if owesLiveCaughtUp {
            // A live re-baseline whose sessions ended before the watch acknowledged a caught-up notice:
            // the watch keeps what its notice marked. The rest of the baseline goes here, announced,
            // and ends with the marker (below), which removes what is still marked.
            let announcement = QueuedMessage.caughtUpFollows(header)
            try postOwn(announcement.frame())
            onPost?(announcement)
            report.messagesPosted += 1
            try port.queueLiveCaughtUp(for: node, in: configuration.pairingEpoch)
            owesCaughtUp = true
        }
        var rangeStart = posted
        while true {
            let (rows, scanned) = try port.pendingRows(for: node, after: posted, maxEntries: configuration.maxBatchEntries,
                                                       maxBytes: configuration.maxBatchBytes) { key, _ in excluded(key) }
            guard scanned > posted else { break }
            var filtered = try entries(of: rows)
            if configuration.testingFaults.skipTombstones { filtered.removeAll { $0.deleted } }
            if filtered.isEmpty {
                posted = scanned
                if rangeStart == cursor, record != nil {
                    // Nothing for this peer in the range and nothing before it in flight: it is passed over.
                    try port.acknowledge(peer: node, through: scanned)
                    cursor = scanned
                    rangeStart = scanned
                    postedThrough = scanned
                }
                continue
            }
            let batch = QueuedMessage.batch(header, after: try QueuedStreamPosition.coded(rangeStart, generation: generation),
                                            through: try QueuedStreamPosition.coded(scanned, generation: generation), entries: filtered)
            try postBatch(batch, entries: filtered.count, into: &report)
            reportedFull = false
            posted = scanned
            rangeStart = scanned
            postedThrough = scanned
        }
        if try owesCaughtUp ?? port.owesQueuedCaughtUp(in: configuration.pairingEpoch) {
            // All of a queued notice's baseline is posted (and what came since): the marker
            // follows it (on stable storage, the debt goes only once the marker is posted).
            let marker = QueuedMessage.caughtUp(header)
            try postOwn(marker.frame())
            onPost?(marker)
            report.messagesPosted += 1
            try port.settleQueuedCaughtUp(in: configuration.pairingEpoch)
        }
        owesCaughtUp = false
    }

    /// Posts every change of the keys the peer declared differently that it
    /// may have (its cursor passed them while they were passed over), as one
    /// batch named by `repairRange`; posted again if it was lost.
    private func postRepair(_ record: PeerRecord, into report: inout QueuedDeliveryReport) throws {
        let entries = try entries(of: port.rows(declaredBy: record.mismatched, for: record.node, maxEntries: Int.max).filter { !excluded($0.key) })
        try postBatch(QueuedMessage.batch(header, after: Self.repairRange.after, through: Self.repairRange.through, entries: entries),
                      entries: entries.count, into: &report)
        repairPosted = true
    }

    /// Posts `batch` (a stretch of the stream, or the repair batch) of `count` entries.
    private func postBatch(_ batch: QueuedMessage, entries count: Int, into report: inout QueuedDeliveryReport) throws {
        let frame = batch.frame()
        try postOwn(frame)
        onPost?(batch)
        var delta = SyncCounters()  // counted as a live session counts a batch it sends: entries and payload bytes
        (delta.batchesSent, delta.entriesSent, delta.bytesSent) = (1, count, frame.payload.count)
        reporter.count(delta)
        postedSinceRetry = true
        report.messagesPosted += 1
        report.entriesPosted += count
    }

    private func excluded(_ key: String) -> Bool {
        guard let descriptor = port.registry.descriptor(forEntry: key) else { return true }
        return !descriptor.replicates(from: port.role) || (!mismatchedForPeer.isEmpty && mismatchedForPeer.contains(descriptor.name))
    }

    /// On a watch that took a new node id: what it posted under the old one
    /// was taken unused (its declarations too), so posting starts over from
    /// the cursor, and a pause after a refusal of those messages ends.
    func startOverUnderNewNodeID() {
        postedThrough = nil
        stalled = nil
        stalledRegistries = nil
        declarationsPostedFor = nil
        retriedRegistries = nil
        repairPosted = false
    }

    func emit(_ event: SyncEvent) {
        reporter.report(event, peer: peerNode)
    }
}

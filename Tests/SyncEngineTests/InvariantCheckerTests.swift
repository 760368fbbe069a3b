@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// The simulator's frame checks judge who a message is about, not only who sent it.
@Suite struct InvariantCheckerTests {
    let registry: KeyRegistry
    let units = Key<String>("units", default: "", availability: .phoneWithWatchSync, policy: .automaticSmall)
    let token = Key<String>("token", default: "", availability: .phoneOnly, policy: .automaticSmall)
    let notes = Key<String>("notes", default: "", availability: .all, policy: .manual)
    let pin = Key<String>("pin", default: "", availability: .all, policy: .automaticSmall, security: .encrypted)

    init() throws {
        registry = try KeyRegistry([units, token, notes, pin])
    }

    func hello(from role: DeviceRole, resuming keys: [String]) -> Frame {
        SyncMessage.hello(.init(protocolRange: 1...1, node: role == .phone ? 1 : 2, role: role, isReply: false, pairingEpoch: "e",
                                registryFingerprint: [], declarations: [],
                                partialTransfers: keys.map { PartialTransfer(key: $0, version: HLCTimestamp(packed: 1 << 16, node: 1), received: 2) }))
            .frame()
    }

    func batch(from role: DeviceRole, key: String) -> Frame {
        SyncMessage.batch(.init(id: 1, entries: [WireEntry(key: key, version: HLCTimestamp(packed: 1 << 16, node: 2), base: .zero,
                                                          deleted: false, encoding: "json", value: Array("\"x\"".utf8))])).frame()
    }

    func result(_ frames: [(DeviceRole, Frame)]) -> [Invariant: InvariantResult] {
        var checker = InvariantChecker(registry: registry)
        for (role, frame) in frames { checker.observe(frame, from: role, senderID: role == .phone ? 1 : 2, model: WriteModel(), at: 0) }
        return Dictionary(uniqueKeysWithValues: Invariant.allCases.map { ($0, checker.log.results[$0]!) })
    }

    /// The watch resuming a phone → watch transfer names the key: that is the protocol, not a watch value.
    @Test func watchMayResumeAPhoneToWatchTransfer() {
        let results = result([(.watch, hello(from: .watch, resuming: ["units"]))])
        #expect(results[.direction]!.passed && results[.placement]!.passed)
    }

    /// The phone cannot be receiving a phoneWithWatchSync value from the watch.
    @Test func phoneResumingAWatchValueOfAPhoneOnlyDirectionKeyIsFlagged() {
        let results = result([(.phone, hello(from: .phone, resuming: ["units"]))])
        #expect(!results[.direction]!.passed)
    }

    @Test func watchValueOfAPhoneToWatchKeyIsFlagged() {
        let results = result([(.watch, batch(from: .watch, key: "units"))])
        #expect(!results[.direction]!.passed)
        #expect(results[.direction]!.violations.first?.contains("watch value of phoneWithWatchSync key units") == true)
    }

    /// A manual key's change leaves the node that wrote it only after a
    /// `sync` there made after the write; the other node may pass it on.
    @Test func aManualChangeSentBeforeItsWritersSyncIsFlagged() {
        let version = HLCTimestamp(packed: 1 << 16, node: 2)
        func manualResult(_ steps: (inout WriteModel) -> Void, sentBy sender: DeviceRole, deleted: Bool = false) -> InvariantResult {
            var model = WriteModel()
            steps(&model)
            let frame = SyncMessage.batch(.init(id: 1, entries: [WireEntry(key: "notes", version: version, base: .zero, deleted: deleted,
                                                                           encoding: "json", value: deleted ? nil : Array("\"x\"".utf8))])).frame()
            var checker = InvariantChecker(registry: registry)
            checker.observe(frame, from: sender, senderID: sender == .phone ? 1 : 2, model: model, at: 0)
            return checker.log.results[.manualUntilSync]!
        }
        let write: (inout WriteModel) -> Void = { $0.recordWrite(node: .watch, nodeID: 2, key: "notes", version: version, deleted: false, size: 3) }
        let unsynced = manualResult(write, sentBy: .watch)
        #expect(!unsynced.passed && unsynced.checks == 1)
        #expect(unsynced.violations.first?.contains("watch sent manual key notes") == true, "\(unsynced.violations)")
        let syncedBefore = manualResult({ $0.recordSync(node: .watch, nodeID: 2); write(&$0) }, sentBy: .watch)
        #expect(!syncedBefore.passed, "a sync made before the write does not release it")
        #expect(manualResult({ write(&$0); $0.recordSync(node: .watch, nodeID: 2) }, sentBy: .watch).passed)
        #expect(manualResult({ write(&$0); $0.recordSync(node: .phone, nodeID: 1) }, sentBy: .watch).passed == false,
                "the phone's sync does not release the watch's change")
        #expect(manualResult(write, sentBy: .phone).passed, "the phone passes on a change it received")
        let delete: (inout WriteModel) -> Void = { $0.recordWrite(node: .watch, nodeID: 2, key: "notes", version: version, deleted: true, size: 0) }
        #expect(!manualResult(delete, sentBy: .watch, deleted: true).passed, "a delete waits for the sync too")
    }

    /// A key an older app declared automatic and the update declares manual:
    /// a change written before the update that had not gone yet waits for a
    /// sync after the update; one that had gone (a peer may hold it) is not
    /// judged; one written after the update waits for a sync after it.
    @Test func aChangeAnUpdateMadeManualIsFlaggedUntilASyncAfterTheUpdate() throws {
        let older = try KeyRegistry([units, token, Key<String>("notes", default: "", availability: .all, policy: .automaticSmall), pin])
        let before = HLCTimestamp(packed: 1 << 16, node: 2), after = HLCTimestamp(packed: 2 << 16, node: 2)
        func frame(_ version: HLCTimestamp) -> Frame {
            SyncMessage.batch(.init(id: 1, entries: [WireEntry(key: "notes", version: version, base: .zero, deleted: false,
                                                              encoding: "json", value: Array("\"x\"".utf8))])).frame()
        }
        /// Runs `steps`; `.send(v)` observes the watch sending version `v`.
        enum Step { case write(HLCTimestamp), update, sync, send(HLCTimestamp) }
        func manualResult(_ steps: [Step]) -> InvariantResult {
            var model = WriteModel()
            var checker = InvariantChecker(registry: registry, declaredDifferently: ["notes"])
            checker.olderApps[2] = older
            for step in steps {
                switch step {
                case .write(let v):
                    let declared = (checker.olderApps[2] ?? registry).descriptor(forEntry: "notes")
                    model.recordWrite(node: .watch, nodeID: 2, key: "notes", version: v, deleted: false, size: 3, declaration: declared)
                case .update:
                    checker.olderApps[2] = nil
                    model.recordAppUpdate(nodeID: 2)
                case .sync: model.recordSync(node: .watch, nodeID: 2)
                case .send(let v): checker.observe(frame(v), from: .watch, senderID: 2, model: model, at: 0)
                }
            }
            return checker.log.results[.manualUntilSync]!
        }
        let unsent = manualResult([.write(before), .update, .send(before)])
        #expect(!unsent.passed, "not sent before the update, sent after it without a sync")
        #expect(unsent.violations.first?.contains("without a sync after the app update that made the key manual") == true, "\(unsent.violations)")
        #expect(!manualResult([.write(before), .sync, .update, .send(before)]).passed, "a sync before the update does not release it")
        #expect(manualResult([.write(before), .update, .sync, .send(before)]).passed)
        #expect(manualResult([.write(before), .send(before), .update, .send(before)]).passed, "it went before the update")
        let later = manualResult([.update, .write(after), .send(after)])
        #expect(!later.passed && later.violations.first?.contains("without a sync after the write") == true, "\(later.violations)")
        #expect(manualResult([.update, .write(after), .sync, .send(after)]).passed)
    }

    /// Queued declarations, like a hello's, name no key that never leaves the sender.
    @Test func localOnlyKeyInQueuedDeclarationsIsFlagged() {
        let header = QueuedHeader(protocolVersion: 6, node: 1, role: .phone, pairingEpoch: "e", registryFingerprint: [])
        func placement(_ lines: [String]) -> InvariantResult {
            var checker = InvariantChecker(registry: registry)
            checker.observeQueued(.declarations(header, lines, isAnswer: false), from: .phone, senderID: 1, model: WriteModel(), at: 0)
            return checker.log.results[.placement]!
        }
        #expect(placement(registry.wireDeclarations(from: .phone)).passed, "what the engine posts")
        let leaked = placement([token.descriptor.wireDeclaration])
        #expect(!leaked.passed)
        #expect(leaked.violations.first?.contains("queued declarations declares local-only key token") == true, "\(leaked.violations)")
    }

    /// A live value of a key declared encrypted is stored encrypted on every node.
    @Test func anUnencryptedValueOfAnEncryptedKeyIsFlagged() {
        func atRest(_ key: String, encrypted: Bool, deleted: Bool = false) -> InvariantResult {
            let version = HLCTimestamp(packed: 1 << 16, node: 2)
            let info = EntryInfo(key: key, encoding: "json", version: version, isDeleted: deleted, size: 3, changeSequence: 1, lane: .automatic,
                                 isPending: false, isEncrypted: encrypted)
            let node = InvariantChecker.Snapshot(role: .watch, nodeID: 2, entries: [key: info], values: deleted ? [:] : [key: Array("\"x\"".utf8)],
                                                 name: "watch")
            var checker = InvariantChecker(registry: registry)
            checker.checkState(nodes: [node], connected: [], model: WriteModel(), label: "end")
            return checker.log.results[.encryptedAtRest]!
        }
        #expect(atRest("pin", encrypted: true).passed)
        let plain = atRest("pin", encrypted: false)
        #expect(!plain.passed)
        #expect(plain.violations.first?.contains("watch holds pin") == true, "\(plain.violations)")
        #expect(atRest("pin", encrypted: false, deleted: true).passed, "a tombstone has no value")
        #expect(atRest("notes", encrypted: false).passed, "a key not declared encrypted")
    }

    @Test func localOnlyKeyInAResumeNoteIsFlagged() {
        let results = result([(.watch, hello(from: .watch, resuming: ["token"]))])
        #expect(!results[.placement]!.passed)
    }
}

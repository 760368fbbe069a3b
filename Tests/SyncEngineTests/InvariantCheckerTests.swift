@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// The simulator's frame checks judge who a message is about, not only who sent it.
@Suite struct InvariantCheckerTests {
    let registry: KeyRegistry
    let units = Key<String>("units", default: "", availability: .phoneWithWatchSync, policy: .automaticSmall)
    let token = Key<String>("token", default: "", availability: .phoneOnly, policy: .automaticSmall)

    init() throws {
        registry = try KeyRegistry([units, token])
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

    @Test func localOnlyKeyInAResumeNoteIsFlagged() {
        let results = result([(.watch, hello(from: .watch, resuming: ["token"]))])
        #expect(!results[.placement]!.passed)
    }
}

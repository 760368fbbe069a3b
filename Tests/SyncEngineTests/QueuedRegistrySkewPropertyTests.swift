import Foundation
import PropertyBased
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Queued delivery between apps whose registries differ on one key, then
/// agree (the older app updated, the watch's or the phone's): over random
/// histories of writes on both sides, rounds of either side, lost messages,
/// restarts and the update at any point, the key declared differently never
/// reaches the older app while it is, the key declared alike flows both ways,
/// and once both are updated and the rounds run out, the two stores hold the
/// same values, nothing waits and nothing is recorded as mismatched.
@Suite struct QueuedRegistrySkewPropertyTests {
    static let shared = Key<Int>("a", default: 0)
    static let skewed = Key<Int>("b", default: 0)
    static let skewedBefore = Key<Int>("b", default: 0, policy: .manual)

    /// Sides are indexed 0 (the phone) and 1 (the watch).
    enum Step: CustomStringConvertible {
        case writeShared(side: Int, Int), newWritesSkewed(Int), round(side: Int), lose(side: Int), restart(side: Int), updateOld

        init(_ code: Int) {
            let side = (code / 10) % 2
            switch code % 10 {
            case 0: self = .writeShared(side: side, code)
            case 1: self = .newWritesSkewed(code)
            case 2, 3, 4, 5: self = .round(side: code % 2)
            case 6: self = .lose(side: side)
            case 7: self = .restart(side: side)
            case 8: self = .writeShared(side: 1 - side, code)
            default: self = .updateOld
            }
        }

        var description: String {
            let name = ["phone", "watch"]
            return switch self {
            case .writeShared(let side, let value): "\(name[side]).a=\(value)"
            case .newWritesSkewed(let value): "new.b=\(value)"
            case .round(let side): "\(name[side]).round"
            case .lose(let side): "\(name[side]).loses"
            case .restart(let side): "\(name[side]).restarts"
            case .updateOld: "updateOld"
            }
        }
    }

    @Test(arguments: [1, 0])
    func keysDeclaredAlikeFlowAndTheOtherWaitsThenConverges(olderSide: Int) async {
        let cases = max(20, propertyCases / 10)  // each case writes and fsyncs mailbox files
        await propertyCheck(count: cases, input: Gen.int(in: 0...9_999).array(of: 1...30)) { codes in
            await Task.yield()
            let steps = codes.map(Step.init)
            do {
                if let failure = try Self.run(steps, olderSide: olderSide) { Issue.record("\(failure); older side \(olderSide); history: \(steps)") }
            } catch {
                Issue.record("\(error); older side \(olderSide); history: \(steps)")
            }
        }
    }

    /// Runs `steps`, then updates the older side (if it was not) and runs
    /// rounds until nothing moves; returns what broke, if anything.
    static func run(_ steps: [Step], olderSide: Int) throws -> String? {
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let configuration = ReplicationConfiguration(pairingEpoch: secret.epoch)
        // One clock for both, moved on by the rounds at the end (a device asks a peer that declares
        // keys differently again at most once a minute).
        let clock = ManualClock()
        let roles: [DeviceRole] = [.phone, .watch]
        func open(_ side: Int, updated: Bool) throws -> SyncStore {
            let keys: [any KeyDeclaration] = side == olderSide && !updated ? [shared, skewedBefore] : [shared, skewed]
            return try SyncStore(path: folder.file("\(roles[side]).sqlite"), role: roles[side], registry: KeyRegistry(keys),
                                 options: StoreOptions(clock: clock))
        }
        var stores = [try open(0, updated: false), try open(1, updated: false)]
        defer { stores.forEach { $0.close() } }
        var peers = stores.map { SyncPeer(store: $0, configuration: configuration) }
        let mailboxRoles: [MailboxRole] = [.phone, .watch]
        var boxes = try mailboxRoles.map { try Mailbox(directory: folder.path, role: $0, secret: secret) }
        let newerSide = 1 - olderSide
        var updated = false
        var newerValuesOfB = Set<Int>()

        func updateOlder() throws {
            guard !updated else { return }
            stores[olderSide].close()
            stores[olderSide] = try open(olderSide, updated: true)
            peers[olderSide] = SyncPeer(store: stores[olderSide], configuration: configuration)
            boxes[olderSide] = try Mailbox(directory: folder.path, role: mailboxRoles[olderSide], secret: secret)
            updated = true
        }

        for step in steps {
            clock.advance(by: 1)
            switch step {
            case .writeShared(let side, let value): try stores[side].setNow(value, for: shared)
            case .newWritesSkewed(let value):
                try stores[newerSide].setNow(value, for: skewed)
                newerValuesOfB.insert(value)
            case .round(let side): try peers[side].deliverQueued(through: boxes[side])
            case .lose(let side):
                if let first = try boxes[side].outgoingMessages().first {
                    try FileManager.default.removeItem(atPath: boxes[side].outboxPath + "/" + first.fileName)
                }
            case .restart(let side): peers[side] = SyncPeer(store: stores[side], configuration: configuration)
            case .updateOld: try updateOlder()
            }
            // While the older app declares b differently, none of the newer one's values of b reach it.
            if !updated, let value = try stores[olderSide].storedValue(for: skewedBefore), newerValuesOfB.contains(value) {
                return "b=\(value) reached the \(roles[olderSide]), which declares b differently"
            }
        }
        try updateOlder()
        for _ in 0..<12 {
            clock.advance(by: MailboxReplicator.probeInterval)
            try peers[0].deliverQueued(through: boxes[0])
            try peers[1].deliverQueued(through: boxes[1])
        }
        for key in [shared, skewed] {
            let (p, w) = (try stores[0].storedValue(for: key), try stores[1].storedValue(for: key))
            if p != w { return "\(key.name): phone \(String(describing: p)), watch \(String(describing: w))" }
            for side in 0...1 where try stores[side].entryInfo(forKey: key.name)?.isPending == true {
                return "\(key.name) still waits on the \(roles[side])"
            }
        }
        for side in 0...1 {
            if let record = try stores[side].peerRecords().first, !record.mismatched.isEmpty {
                return "the \(roles[side]) still holds \(record.mismatched) as mismatched"
            }
        }
        return nil
    }
}

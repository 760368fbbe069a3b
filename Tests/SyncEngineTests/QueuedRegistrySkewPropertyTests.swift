import Foundation
import PropertyBased
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Queued delivery between apps whose registries differ on one key, then
/// agree (the watch app updated): over random histories of writes on both
/// sides, rounds of either side, lost messages and the update at any point,
/// the key declared differently never reaches the watch while it is, the
/// key declared alike flows both ways, and once both are updated and the
/// rounds run out, the two stores hold the same values and nothing waits.
@Suite struct QueuedRegistrySkewPropertyTests {
    static let shared = Key<Int>("a", default: 0)
    static let skewed = Key<Int>("b", default: 0)
    static let skewedBefore = Key<Int>("b", default: 0, policy: .manual)

    enum Step: CustomStringConvertible {
        case phoneWrites(shared: Bool, Int), watchWrites(Int), phoneRound, watchRound, losePhoneMessage, loseWatchMessage, updateWatch
        /// The app restarts: its queued delivery starts over from what the store holds.
        case restartPhone, restartWatch

        init(_ code: Int) {
            switch code % 10 {
            case 0: self = .phoneWrites(shared: true, code)
            case 1: self = .phoneWrites(shared: false, code)
            case 2: self = .watchWrites(code)
            case 3, 4: self = .phoneRound
            case 5, 6: self = .watchRound
            case 7: self = code % 2 == 0 ? .losePhoneMessage : .loseWatchMessage
            case 8: self = code % 2 == 0 ? .restartPhone : .restartWatch
            default: self = .updateWatch
            }
        }

        var description: String {
            switch self {
            case .phoneWrites(let shared, let value): "phone.\(shared ? "a" : "b")=\(value)"
            case .watchWrites(let value): "watch.a=\(value)"
            case .phoneRound: "phoneRound"
            case .watchRound: "watchRound"
            case .losePhoneMessage: "losePhoneMessage"
            case .loseWatchMessage: "loseWatchMessage"
            case .updateWatch: "updateWatch"
            case .restartPhone: "restartPhone"
            case .restartWatch: "restartWatch"
            }
        }
    }

    @Test func keysDeclaredAlikeFlowAndTheOtherWaitsThenConverges() async {
        let cases = max(20, propertyCases / 5)  // each case writes and fsyncs mailbox files
        await propertyCheck(count: cases, input: Gen.int(in: 0...9_999).array(of: 1...30)) { codes in
            await Task.yield()
            let steps = codes.map(Step.init)
            do {
                if let failure = try Self.run(steps) { Issue.record("\(failure); history: \(steps)") }
            } catch {
                Issue.record("\(error); history: \(steps)")
            }
        }
    }

    /// Runs `steps`, then updates the watch (if it was not) and runs rounds
    /// until nothing moves; returns what broke, if anything.
    static func run(_ steps: [Step]) throws -> String? {
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let configuration = ReplicationConfiguration(pairingEpoch: secret.epoch)
        // One clock for both, moved on by the rounds at the end (a device asks a peer that declares
        // keys differently again at most once a minute).
        let clock = ManualClock()
        let phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: KeyRegistry([shared, skewed]),
                                  options: StoreOptions(clock: clock))
        defer { phone.close() }
        var watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: KeyRegistry([shared, skewedBefore]),
                                  options: StoreOptions(clock: clock))
        defer { watch.close() }
        var phonePeer = SyncPeer(store: phone, configuration: configuration)
        var watchPeer = SyncPeer(store: watch, configuration: configuration)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
        var watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
        var updated = false
        var phoneValuesOfB = Set<Int>()

        func updateWatch() throws {
            guard !updated else { return }
            watch.close()
            watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: KeyRegistry([shared, skewed]),
                                  options: StoreOptions(clock: clock))
            watchPeer = SyncPeer(store: watch, configuration: configuration)
            watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)
            updated = true
        }
        func loseOldest(_ box: Mailbox) throws {
            guard let first = try box.outgoingMessages().first else { return }
            try FileManager.default.removeItem(atPath: box.outboxPath + "/" + first.fileName)
        }

        for step in steps {
            clock.advance(by: 1)
            switch step {
            case .phoneWrites(true, let value): try phone.setNow(value, for: shared)
            case .phoneWrites(false, let value):
                try phone.setNow(value, for: skewed)
                phoneValuesOfB.insert(value)
            case .watchWrites(let value): try watch.setNow(value, for: shared)
            case .phoneRound: try phonePeer.deliverQueued(through: phoneBox)
            case .watchRound: try watchPeer.deliverQueued(through: watchBox)
            case .losePhoneMessage: try loseOldest(phoneBox)
            case .loseWatchMessage: try loseOldest(watchBox)
            case .updateWatch: try updateWatch()
            case .restartPhone: phonePeer = SyncPeer(store: phone, configuration: configuration)
            case .restartWatch: watchPeer = SyncPeer(store: watch, configuration: configuration)
            }
            // While the watch declares b differently, none of the phone's values of b reach it.
            if !updated, let value = try watch.storedValue(for: skewedBefore), phoneValuesOfB.contains(value) {
                return "the phone's b=\(value) reached a watch that declares b differently"
            }
        }
        try updateWatch()
        for _ in 0..<12 {
            clock.advance(by: MailboxReplicator.probeInterval)
            try phonePeer.deliverQueued(through: phoneBox)
            try watchPeer.deliverQueued(through: watchBox)
        }
        for key in [shared, skewed] {
            let (p, w) = (try phone.storedValue(for: key), try watch.storedValue(for: key))
            if p != w { return "\(key.name): phone \(String(describing: p)), watch \(String(describing: w))" }
            if try phone.entryInfo(forKey: key.name)?.isPending == true { return "\(key.name) still waits on the phone" }
            if try watch.entryInfo(forKey: key.name)?.isPending == true { return "\(key.name) still waits on the watch" }
        }
        if let record = try phone.knownPeers().first, !record.mismatched.isEmpty { return "the phone still holds \(record.mismatched) as mismatched" }
        return nil
    }
}

import Foundation
@_spi(Testing) import SyncEngine
import SyncTransport

/// Queued delivery in a scenario with `"mailbox": true`: one mailbox
/// directory per watch pairing (`mailbox-<epoch>` in the run folder), and a
/// `MailboxReplicator` per node and pairing while the node runs (a crash
/// drops it, as a process would). Between steps, every node that runs does
/// rounds until nothing moves: it reads and applies what was posted to it,
/// and posts its pending changes when the live link to its peer is down
/// (partitioned, or either node not running).
final class ScenarioMailboxes {
    let state: RunState
    /// The virtual time the checker sees posted messages at.
    var now: Int64 = 0
    private var secrets: [String: PairingSecret] = [:]
    private var drivers: [String: (store: ObjectIdentifier, driver: MailboxReplicator)] = [:]

    init(state: RunState) {
        self.state = state
    }

    func directory(epoch: String) -> String {
        (state.folder as NSString).appendingPathComponent("mailbox-" + epoch)
    }

    private func driver(for node: SimNode, epoch: String) throws -> MailboxReplicator? {
        guard let store = node.store, !node.powerFailed else { return nil }
        let key = "\(node.name.rawValue)|\(epoch)"
        if let existing = drivers[key], existing.store == ObjectIdentifier(store) { return existing.driver }
        let secret = secrets[epoch] ?? PairingSecret.generate()
        secrets[epoch] = secret
        var limits = MailboxLimits.default
        if let messages = state.scenario.mailboxMessages { limits.maxMessages = messages }
        let mailbox = try Mailbox(directory: directory(epoch: epoch), role: node.role == .phone ? .phone : .watch, secret: secret, limits: limits)
        var configuration = state.replication(of: node, epoch: epoch)
        if let entries = state.scenario.queuedBatchEntries { configuration.maxBatchEntries = entries }
        let driver = MailboxReplicator(port: SQLiteReplicationPort(store), reporter: StoreReporter(store), configuration: configuration,
                                       mailbox: mailbox)
        let role = node.role
        // The node's id when it posts: a watch refused for its node id is known by its new one from then on.
        driver.onPost = { [unowned self, unowned node] message in
            state.checker.observeQueued(message, from: role, senderID: node.nodeID, model: state.model, at: now)
        }
        drivers[key] = (ObjectIdentifier(store), driver)
        return driver
    }

    /// Rounds of every running node of every pairing until nothing moves (at
    /// most 50 passes); returns whether anything was read or posted.
    @discardableResult
    func rounds<Link: ScenarioLink>(link: Link) -> Bool {
        var movedAtAll = false
        for _ in 0..<50 {
            var moved = false
            for watch in state.watches {
                let epoch = link.pairingEpoch(of: watch)
                let live = state.phone.isUp && watch.isUp && !link.isPartitioned(watch)
                for node in [state.phone, watch] {
                    guard let driver = try? driver(for: node, epoch: epoch) else { continue }
                    let report = driver.exchange(sendsPending: !live)
                    if report.messagesRead > 0 || report.messagesPosted > 0 { moved = true }
                }
            }
            movedAtAll = movedAtAll || moved
            if !moved { break }
        }
        return movedAtAll
    }

    /// The `queued-delivery` invariant: no file was refused, and (after
    /// `rounds`) no message waits between a phone and a watch that both run.
    func check<Link: ScenarioLink>(label: String, link: Link) {
        state.checker.log.checked(.queuedDelivery)
        for watch in state.watches {
            let folder = directory(epoch: link.pairingEpoch(of: watch))
            for sender in MailboxRole.allCases {
                let spool = Mailbox.spool(folder, from: sender)
                let files = (try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []
                let refused = ((try? FileManager.default.contentsOfDirectory(atPath: spool + "/refused")) ?? []).filter { !$0.hasSuffix(".reason") }
                for file in refused.sorted() {
                    let reason = (try? String(contentsOfFile: spool + "/refused/" + file + ".reason", encoding: .utf8)) ?? "no reason recorded"
                    // Apps with registries that differ refuse each other's messages until they have compared them.
                    // (The reason is "<code>: <text>", as the transport wrapped it: "protocol-violation: <code>: <text>".)
                    if reason.components(separatedBy: ": ").prefix(2).contains(where: state.checker.refusalExpected(code:)) { continue }
                    state.checker.log.violate(.queuedDelivery, "\(label): the \(sender.counterpart) refused \(file) of the \(watch.name) pairing: \(reason.trimmingCharacters(in: .whitespacesAndNewlines))")
                }
                let waiting = files.filter { $0.hasSuffix(".msg") && !$0.hasPrefix(".") }.count
                if waiting > 0, state.phone.canSettle, watch.canSettle {
                    state.checker.log.violate(.queuedDelivery, "\(label): \(waiting) messages from the \(sender) still wait in the \(watch.name) pairing's mailbox while both run")
                }
            }
        }
    }
}

import Foundation
@testable import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// Interfaces the issues spell out, checked as a user scripting against them
/// would: event fields, command replies.
@Suite(.timeLimit(.minutes(5))) struct InterfaceContractTests {
    /// Issue 15: "every event that concerns a peer carries `peer`". A round of
    /// queued delivery goes through one pairing's mailbox, so its `queued`
    /// event names that mailbox's peer once it is known (a phone with several
    /// watches has one mailbox each). Before, it came with a nil peer, and
    /// `syncsim node` printed it without `peer`.
    @Test func aQueuedDeliveryEventNamesItsPeer() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let secret = PairingSecret.generate()
        let configuration = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: configuration)
        let watch = SyncPeer(store: pair.watch, configuration: configuration)
        let phoneBox = try Mailbox(directory: folder.file("mailbox"), role: .phone, secret: secret)
        let watchBox = try Mailbox(directory: folder.file("mailbox"), role: .watch, secret: secret)
        let phoneEvents = pair.phone.peerEvents()
        let watchEvents = pair.watch.peerEvents()

        try await pair.phone.set(5, for: TestKeys.steps)
        #expect(try phone.deliverQueued(through: phoneBox).messagesPosted > 0)  // posted to a watch not met yet
        let read = try watch.deliverQueued(through: watchBox)                      // applied, acknowledged
        #expect(read.entriesApplied == 1)
        #expect(try phone.deliverQueued(through: phoneBox).acknowledged)          // the acknowledgement moved the cursor

        let (phoneNode, watchNode) = (pair.phone.nodeID, pair.watch.nodeID)
        pair.phone.close()
        pair.watch.close()
        let onWatch = try await all(of: watchEvents, "the watch's events until its store closed").filter(\.isQueuedDelivery)
        let onPhone = try await all(of: phoneEvents, "the phone's events until its store closed").filter(\.isQueuedDelivery)
        #expect(onWatch.count == 1)
        #expect(onWatch.allSatisfy { $0.peer == phoneNode }, "\(onWatch)")
        // The first round posted before the phone had heard of any watch: no peer to name yet.
        #expect(onPhone.count == 2)
        #expect(onPhone.first?.peer == nil, "\(onPhone)")
        #expect(onPhone.last?.peer == watchNode, "\(onPhone)")
    }
}

/// Issue 15 again: `syncsim node` printed a change a peer's batch brought as
/// `{"event":"change",...,"origin":"remote"}` without `peer`, so on a phone
/// with several watches a script could not tell which watch it came from
/// (`StoreChange` did not say). A change applied from a peer now names it,
/// in `StoreChange.peer` and in the node's line.
@Suite struct RemoteChangePeerTests {
    @Test func aRemoteChangeNamesThePeerItCameFrom() async throws {
        let pair = try Pair()
        let seen = SeenChanges(pair.watch)
        let seenOnPhone = SeenChanges(pair.phone)
        // What the node prints of the watch's events and changes, through a pipe.
        let pipe = Pipe()
        let output = JSONLineWriter(handle: pipe.fileHandleForWriting)
        let forwarding = Task { [events = pair.watch.peerEvents(), changes = pair.watch.changes()] in
            await NodeCommand.forwardEvents(events, changes, output: output)
        }
        try await pair.phone.set(5, for: TestKeys.steps)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        #expect(try await pair.watch.get(TestKeys.steps) == 5)
        let remote = seen.all.filter { $0.key == TestKeys.steps.name }
        #expect(remote.count == 1 && remote.allSatisfy { $0.origin == .remote && $0.peer == pair.phone.nodeID }, "\(remote)")
        #expect(seenOnPhone.all.allSatisfy { $0.origin == .local && $0.peer == nil }, "\(seenOnPhone.all)")

        pair.watch.close()  // the streams end, and so does the forwarding
        try await withDeadline("the node's forwarding to end with the store") { await forwarding.value }
        try pipe.fileHandleForWriting.close()
        let text = String(decoding: try pipe.fileHandleForReading.readToEnd() ?? Data(), as: UTF8.self)
        let lines = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let change = try #require(lines.first { $0["event"] as? String == "change" }, "\(text)")
        #expect(change["key"] as? String == TestKeys.steps.name)
        #expect(change["peer"] as? String == String(pair.phone.nodeID, radix: 16), "\(change)")
        pair.phone.close()
    }
}

/// The README: `invalid-command` is the code for "an unknown command, a
/// missing argument, a value that is not JSON". The code was right, but a
/// known command missing its argument (`get`, `delete`, `wait-idle`) was
/// answered "unknown command 'get'", which sends a user looking for a
/// command that exists. It now says which argument the command takes.
@Suite struct NodeMissingArgumentTests {
    @Test func aKnownCommandMissingItsArgumentIsNotCalledUnknown() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("n.sqlite"), role: .phone, registry: try KeyRegistry(descriptors: [KeyDescriptor(name: "a")]))
        defer { store.close() }
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let console = NodeConsole(store: store, peer: peer, output: JSONLineWriter(handle: FileHandle.nullDevice))
        for (line, usage) in [("get", "get KEY"), ("delete", "delete KEY"), ("put a", "put KEY JSON"), ("wait-idle", "wait-idle SECONDS"),
                              ("forget-peer", "forget-peer NODE"), ("sync now", "sync")] {
            let reply = await console.execute(line)
            #expect(reply["code"] as? String == "invalid-command", "\(line): \(reply)")
            let error = reply["error"] as? String ?? ""
            #expect(!error.contains("unknown command") && error.hasSuffix("use \(usage)"), "\(line): \(reply)")
        }
        // Only the command word comes back, never the rest of the line: it may be a value (a typo of
        // `put` before an encrypted key's value, or one argument too many).
        for line in ["Put vault:pin 1234-5678", "get vault:pin 1234-5678"] {
            let error = await console.execute(line)["error"] as? String ?? ""
            #expect(!error.contains("1234") && !error.contains("vault"), "\(line): \(error)")
        }
        #expect((await console.execute(String(repeating: "x", count: 100))["error"] as? String ?? "").contains("'\(String(repeating: "x", count: 40))'"))
        // An unknown command still lists every command, in the README's order.
        let unknown = await console.execute("frobnicate")["error"] as? String ?? ""
        #expect(unknown.hasPrefix("unknown command 'frobnicate'"), "\(unknown)")
        #expect(unknown.hasSuffix("use put KEY JSON | get KEY | delete KEY | sync | request-manual | status | wait-idle SECONDS | forget-peer NODE | renew-node-id | quit"), "\(unknown)")
    }
}

/// The README's "Declaring keys" and "Using the store" snippets, as printed
/// (in a temp folder), so that they keep compiling and doing what they say.
struct ReadmeKeysSnippetTests {
    struct Profile: Codable, Sendable, Equatable {
        var name = ""
        static let empty = Profile()
    }

    enum AppKeys {
        static let health = Namespace("health")
        static let steps = Key<Int>("steps", in: health.child("daily"), default: 0,          // health:daily:steps
                                    availability: .all, policy: .automaticSmall)
        static let profile = Key<Profile>("profile", default: .empty, policy: .manual)
        static let token = Key<String>("token", default: "", availability: .phoneOnly, security: .encrypted)
        static let units = Key<String>("units", default: "metric", availability: .phoneWithWatchSync)
        static let tags = Key<[String]>("tags", default: [], resolver: .union())               // merge, not LWW
        static let dailySteps = KeyFamily<Int>("day", in: health, default: 0)                  // health:day:<id>
        static let all: [any KeyDeclaration] = [steps, profile, token, units, tags, dailySteps]
    }

    @Test func declaringKeysAndUsingTheStoreWorkAsPrinted() async throws {
        let folder = TempFolder()
        #expect(AppKeys.steps.name == "health:daily:steps")
        #expect(AppKeys.dailySteps["2026-11-22"].name == "health:day:2026-11-22")
        let registry = try KeyRegistry(AppKeys.all)
        let store = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry,
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        defer { store.close() }
        let changes = store.changes(for: AppKeys.steps)
        try await store.set(1_234, for: AppKeys.steps)
        #expect(try await store.get(AppKeys.steps) == 1_234)
        try await store.remove(AppKeys.steps)
        #expect(try await store.get(AppKeys.steps) == 0)  // default when absent
        try await store.batch { batch in
            try batch.set(["run"], for: AppKeys.tags)
            try batch.set(10_000, for: AppKeys.dailySteps["2026-11-22"])
        }
        #expect(try store.members(of: AppKeys.dailySteps) == ["2026-11-22"])
        let firstChange = try await first(of: changes, "the first change of steps")
        #expect(firstChange.origin == .local && firstChange.kind == .set)
        _ = store.cacheStatistics.hitRate
        // A duplicate name throws, naming both.
        #expect(throws: SyncError.self) { try KeyRegistry(AppKeys.all + [Key<Int>("steps", in: AppKeys.health.child("daily"), default: 1)]) }
    }
}

extension PeerEvent {
    var isQueuedDelivery: Bool {
        if case .queuedDelivery = event { return true }
        return false
    }
}

/// `syncsim node` read `status\r` (a CRLF line from a script written on
/// Windows, or a serial console) as an unknown command.
@Suite struct NodeCRLFLineTests {
    @Test func aCarriageReturnEndsACommandLikeANewline() async throws {
        #expect(NodeConsole.commandText("status\r") == "status")
        #expect(NodeConsole.commandText("  put a 1\r") == "put a 1")
        #expect(NodeConsole.commandText("\r").isEmpty)
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("n.sqlite"), role: .phone, registry: try KeyRegistry(descriptors: [KeyDescriptor(name: "a")]))
        defer { store.close() }
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let console = NodeConsole(store: store, peer: peer, output: JSONLineWriter(handle: FileHandle.nullDevice))
        let reply = await console.execute(NodeConsole.commandText("put a 7\r"))
        #expect(reply["ok"] as? Bool == true, "\(reply)")
        #expect(try store.encodedValue(forKey: "a") == Array("7".utf8))
    }
}

/// A command line that is not UTF-8 is refused, naming why. `syncsim node`
/// read it with each bad byte replaced by U+FFFD, so `put KEY "\xFF\xFE"`
/// stored two replacement characters the script never sent, and answered ok.
@Suite struct NodeNonUTF8LineTests {
    @Test func aLineThatIsNotUTF8IsRefusedAndStoresNothing() async throws {
        let node = try await ListeningPhoneNode()
        defer { node.phone.stop() }
        node.phone.send(bytes: Array("put health:steps \"".utf8) + [0xFF, 0xFE] + Array("\"\n".utf8))
        let refused = try await node.phone.reply("a put whose line is not UTF-8")
        #expect(refused["ok"] as? Bool == false)
        #expect(refused["code"] as? String == "invalid-command")
        #expect((refused["error"] as? String)?.contains("UTF-8") == true, "\(refused)")
        node.phone.send("get health:steps")
        let value = try await node.phone.reply("get")
        #expect(value["present"] as? Bool == false, "nothing was stored: \(value)")
        node.phone.send("put health:steps \"é\"")
        #expect(try await node.phone.reply("a put of UTF-8 text")["ok"] as? Bool == true)
        node.phone.send("quit")
        _ = try await node.phone.reply("quit")
    }
}

import ArgumentParser
import Foundation
import Logging
import SyncEngine
import SyncTransport
import UnixSignals

/// `syncsim node`: one peer in its own process. Prints one JSON line per
/// event on stdout and answers each stdin command with one JSON line.
public struct NodeCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "node",
        abstract: "Run one peer (phone or watch) in this process, driven by commands on stdin.",
        discussion: """
            Commands, one per line: put KEY JSON | get KEY | delete KEY | sync | request-manual | status | wait-idle SECONDS | forget-peer NODE | renew-node-id | quit
            Every command is answered with one JSON line: {"ok":true,...} or {"ok":false,"error":"...","code":"..."}.
            Events are JSON lines too, the first {"event":"listening","port":N} when listening.
            {"event":"rejected","error":"...","suppressed":N,"peer":"tcp:HOST:PORT"}: a peer failed the handshake (or, without "peer", an accept failed: too-many-connections)
            (rate limited: it stands for this rejection and N others not reported on their own).
            {"event":"error","error":"...","peer":"tcp:HOST:PORT"}: a dial of --connect failed (nothing answered, or the handshake failed);
            one the phone refused (another pairing, no common wire version) is dialed again only after the longest wait.
            """)

    @Option(help: "phone or watch.") var role: DeviceRole
    @Option(help: "The store's SQLite file (created when missing).") var db: String
    @Option(help: "The key registry, {\"keys\":[{\"name\",\"availability\",\"policy\",\"security\",\"type\"}]} (type optional).") var keys: String
    @Option(
        name: .customLong("secret-file"),
        help: ArgumentHelp(
            "A pairing secret made by `syncsim pair`.",
            discussion: "A phone listening for several watches takes one per watch (repeat the option); a watch takes exactly one."))
    var secretFiles: [String] = []
    @Option(help: "Listen on HOST:PORT (port 0 picks a free port).") var listen: String?
    @Option(help: "Connect to HOST:PORT, reconnecting with backoff.") var connect: String?
    @Option(name: .customLong("key-file"), help: "Master key file for encrypted keys (default: DB.key, created 0600).") var keyFile: String?
    @Option(
        help: ArgumentHelp(
            "Queued delivery through this directory, shared by both nodes of the pairing.",
            discussion: "With or without --listen/--connect: changes go live over TCP while connected and through the mailbox otherwise (DIR/phone-to-watch and DIR/watch-to-phone). One per --secret-file, in the same order: a phone with several watches repeats it, one directory per watch."))
    var mailbox: [String] = []
    /// The longest stdin line read (`NodeConsole.lineLimit` by default); for tests.
    @Option(name: .customLong("line-limit"), parsing: .unconditional, help: .hidden) var lineLimit: Int?

    public init() {}

    public func validate() throws {
        if let lineLimit, lineLimit < 1 { throw ValidationError("--line-limit must be at least 1") }
        guard (listen == nil) != (connect == nil) || (!mailbox.isEmpty && listen == nil && connect == nil) else {
            throw ValidationError("give exactly one of --listen HOST:PORT or --connect HOST:PORT (or only --mailbox DIR)")
        }
        if !mailbox.isEmpty, mailbox.count != secretFiles.count {
            throw ValidationError(
                "--mailbox serves one pairing: give one --mailbox DIR per --secret-file, in the same order (got \(mailbox.count) and \(secretFiles.count))")
        }
        // Symbolic links resolved: one directory under two spellings would be one spool for two pairings.
        let directories = mailbox.map { URL(fileURLWithPath: $0).standardizedFileURL.resolvingSymlinksInPath().path }
        if let repeated = directories.first(where: { directory in directories.filter { $0 == directory }.count > 1 }) {
            throw ValidationError("--mailbox \(repeated) is given twice: each watch's pairing needs a directory of its own")
        }
        if let address = listen ?? connect, NodeCommand.split(address) == nil {
            throw ValidationError("'\(address)' is not HOST:PORT (a host, e.g. 127.0.0.1, and a port from 0 to 65535)")
        }
        // Port 0 is "any free port" to listen on; no connection can be made to it.
        if let connect, NodeCommand.split(connect)?.port == 0 {
            throw ValidationError("--connect \(connect): the phone's port is 1 to 65535 (port 0 is only for --listen, which then picks a free one)")
        }
        if secretFiles.isEmpty {
            throw ValidationError("give --secret-file PATH (made by `syncsim pair`); a phone listening for several watches takes one per watch")
        }
        if role == .watch, secretFiles.count != 1 {
            throw ValidationError(
                "a watch takes exactly one --secret-file (got \(secretFiles.count)): a watch holds one pairing, with its phone; only a phone takes one per watch")
        }
        if connect != nil, secretFiles.count != 1 {
            throw ValidationError(
                "--connect takes exactly one --secret-file (got \(secretFiles.count)): a watch holds one pairing; only a listening phone takes one per watch")
        }
    }

    /// HOST and PORT of `HOST:PORT` (an IPv6 host in brackets, `[::1]:7000`,
    /// without them); nil without a host (`:7000`, which no dial can reach)
    /// or a port from 0 to 65535.
    static func split(_ address: String) -> (host: String, port: Int)? {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = Substring(address[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]"), host.count >= 2 { host = host.dropFirst().dropLast() }
        guard !host.trimmingCharacters(in: .whitespaces).isEmpty else { return nil }
        return (String(host), port)
    }

    public func run() async throws {
        // A closed stdout is an error of `write`, not a SIGPIPE that kills the node with its store open.
        signal(SIGPIPE, SIG_IGN)
        let output = JSONLineWriter()
        let registry: KeyRegistry
        let secrets: [PairingSecret]
        let store: SyncStore
        do {
            registry = try KeyRegistry.load(jsonFile: keys)
            secrets = try NodeCommand.loadSecrets(secretFiles)
            var options = StoreOptions()
            if registry.descriptors.contains(where: { $0.security == .encrypted }) || keyFile != nil {
                options.encryption = .keyFile(path: keyFile ?? db + ".key")
            }
            options.logger = Logger(label: "syncsim.node") { _ in StreamLogHandler.standardError(label: "syncsim.node") }
            options.renewsNodeIDWhenRestored = true  // as an app should: a copied --db file takes a new node id
            store = try SyncStore(path: db, role: role, registry: registry, options: options)
        } catch {
            output.write(["event": "error", "error": "\(error)"])
            throw ExitCode(2)
        }
        // Each session takes its pairing's epoch from its connection; the first is the default.
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: secrets[0].epoch),
                            tickInterval: .milliseconds(100))
        var tcpConfiguration = try TCPConfiguration(secrets: secrets)
        tcpConfiguration.logger = Logger(label: "syncsim.node.tcp") { _ in StreamLogHandler.standardError(label: "syncsim.node.tcp") }
        let tcp = tcpConfiguration
        let queued: [Mailbox]
        do {
            queued = try zip(mailbox, secrets).map { try Mailbox(directory: $0, role: role == .phone ? .phone : .watch, secret: $1) }
        } catch {
            output.write(["event": "error", "error": "\(error)"])
            throw ExitCode(2)
        }

        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        // Subscribed before anything can emit: a child task starts when it is scheduled, and the
        // sessions' first events (a replication-locked error, say) would otherwise be lost under load.
        let events = store.peerEvents()
        let changes = store.changes()
        // Not a child of the group below, whose tasks are cancelled at quit: it ends once the store
        // closes, after the lines of what the sessions and rounds did as they ended (`disconnected`).
        let forwarding = Task { await NodeCommand.forwardEvents(events, changes, output: output) }
        defer { forwarding.cancel() }
        var listening: (listener: TCPListener, rejections: Task<Void, Never>)?
        defer { listening?.rejections.cancel() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let listen, let (host, port) = NodeCommand.split(listen) {
                let listener = try await TCPListener.bind(host: host, port: port, configuration: tcp)
                output.write(["event": "listening", "port": listener.port])
                group.addTask { await peer.serve(listener) }
                // Not a child of the group: at quit it ends with the listener, after its last report.
                let rejections = Task {
                    // Rate limited: each event stands for one rejection and `suppressed` others not reported on their own.
                    for await rejection in listener.rejectionReports {
                        var event: [String: Any] = ["event": "rejected", "error": "\(rejection.reason)", "suppressed": rejection.suppressed]
                        if let address = rejection.peer { event["peer"] = address }
                        output.write(event)
                    }
                }
                listening = (listener, rejections)
            } else if let connect, let (host, port) = NodeCommand.split(connect) {
                group.addTask { await peer.maintainConnection(host: host, port: port, configuration: tcp) }
            }
            // Outside the group: on quit they end first, their last rounds posting what was written until then.
            let queuedDelivery = queued.map { mailbox in Task { await peer.runQueued(through: mailbox, pollInterval: .milliseconds(100)) } }
            let console = NodeConsole(store: store, peer: peer, output: output, mailboxes: queued, live: listen != nil || connect != nil,
                                      lineLimit: lineLimit ?? NodeConsole.lineLimit)
            // SIGTERM and SIGINT (Ctrl-C) end the node as `quit` does, and so does
            // stdout that can no longer be written (whoever read its lines is gone).
            await withTaskGroup(of: Void.self) { input in
                input.addTask { await console.run() }
                input.addTask { for await _ in signals { return } }
                input.addTask { for await _ in output.failures { return } }
                await input.next()
                input.cancelAll()
            }
            for delivery in queuedDelivery { delivery.cancel() }
            for delivery in queuedDelivery { await delivery.value }
            // No new session from here on; the rejections the rate limit held back get their last report.
            if let listening {
                await listening.listener.close()
                await listening.rejections.value
            }
            // The sessions end before the store closes: what a session records as it ends
            // (how far the peer's changes were received) must reach the file.
            group.cancelAll()
            try await group.waitForAll()
        }
        store.close()
        await forwarding.value
        if let failure = output.writeFailure {
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure,
                                 "stdout could not be written (\(failure)); the node ended as on quit, its store closed")
        }
    }

    /// Loads every secret file; the same pairing in two files is refused (a
    /// mistyped path would otherwise leave a watch without its pairing), and a
    /// missing one is named with the command that makes it.
    static func loadSecrets(_ paths: [String]) throws -> [PairingSecret] {
        var secrets: [PairingSecret] = []
        for path in paths {
            // The library's message for a missing file names its API; a node is told the command.
            // A symbolic link to nothing is not missing: the library names it.
            let isLink = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != nil
            guard FileManager.default.fileExists(atPath: path) || isLink else {
                throw TransportError(.badSecretFile, "no pairing secret file at \(path); make one with `syncsim pair --out \(path)` and give the same file to both nodes")
            }
            let secret = try PairingSecret.load(from: path)
            if let index = secrets.firstIndex(of: secret) {
                throw TransportError(
                    .badSecretFile,
                    "\(paths[index]) and \(path) hold the same pairing (epoch \(secret.epoch)); give each watch's secret file once")
            }
            secrets.append(secret)
        }
        return secrets
    }

    /// Writes each event (with its peer) and each remote change as a JSON line.
    static func forwardEvents(_ events: AsyncStream<PeerEvent>, _ changes: AsyncStream<StoreChange>, output: JSONLineWriter) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await record in events {
                    var line = NodeConsole.json(record.event)
                    if let peer = record.peer {
                        line["peer"] = String(peer, radix: 16)
                    } else if let address = record.address {
                        // A failed dial (its handshake, say): no node id yet, its address as a `rejected` event gives one.
                        line["peer"] = address
                    }
                    output.write(line)
                }
            }
            group.addTask {
                for await change in changes where change.origin == .remote {
                    var line: [String: Any] = ["event": "change", "key": change.key, "kind": change.kind.rawValue, "origin": "remote"]
                    // The peer whose batch brought it, as every event that concerns a peer names it.
                    if let peer = change.peer { line["peer"] = String(peer, radix: 16) }
                    output.write(line)
                }
            }
        }
    }
}

extension DeviceRole: ExpressibleByArgument {}

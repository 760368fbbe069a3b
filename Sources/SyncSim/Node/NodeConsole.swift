import Foundation
import Synchronization
import SyncEngine
import SyncTransport

/// Writes one JSON object per line to stdout, never interleaved. Once a
/// write fails (whoever read the node's lines is gone: a closed pipe), every
/// later line is dropped and `failures` yields why, once: the node ends as
/// on `quit`.
final class JSONLineWriter: Sendable {
    /// Why writing failed; nil while it works.
    private let failure = Mutex<String?>(nil)
    private let handle: FileHandle
    /// Yields the first write failure, then finishes.
    let failures: AsyncStream<String>
    private let failed: AsyncStream<String>.Continuation

    init(handle: FileHandle = .standardOutput) {
        self.handle = handle
        (failures, failed) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Why writing failed, if it did.
    var writeFailure: String? { failure.withLock { $0 } }

    func write(_ object: [String: Any]) {
        guard let json = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .fragmentsAllowed]) else { return }
        // A key named by the peer may hold what the encoder writes raw (DEL, C1 controls, bidirectional overrides).
        let data = VisibleText.escapingInvisibles(inJSON: json)
        let newFailure = failure.withLock { failure -> String? in
            guard failure == nil else { return nil }
            do {
                try handle.write(contentsOf: data + Data("\n".utf8))
                return nil
            } catch {
                failure = "\(error)"
                return failure
            }
        }
        if let newFailure {
            failed.yield(newFailure)
            failed.finish()
        }
    }
}

/// The stdin command loop of `syncsim node`.
struct NodeConsole {
    let store: SyncStore
    let peer: SyncPeer
    let output: JSONLineWriter
    /// The mailboxes of queued delivery (`--mailbox`, one per pairing), if any.
    var mailboxes: [Mailbox] = []
    /// Whether the node syncs live (`--listen` or `--connect`), not only through the mailbox.
    var live = true

    /// The longest line read (`lineLimit`): longer ones are answered once, unread.
    var lineLimit = NodeConsole.lineLimit

    func run() async {
        let input = NodeConsole.inputLines(from: STDIN_FILENO, limit: lineLimit)
        for await read in input {
            let line: String
            switch read {
            case .text(let text):
                line = text
            case .notUTF8(let byteCount):
                // Not read with its bad bytes replaced: a put would store text the script never sent.
                output.write(Self.invalid("a line of \(byteCount) bytes is not UTF-8 text; commands and their JSON values are UTF-8"))
                continue
            case .tooLong(let byteCount):
                // Skipped to its newline, never held whole: a writer that sends no newline cannot fill the memory.
                output.write(Self.invalid("a line of more than \(lineLimit) bytes (\(byteCount) read to its end) is longer than any command; it was skipped"))
                continue
            }
            let trimmed = NodeConsole.commandText(line)
            if trimmed.isEmpty { continue }
            if trimmed == "quit" {
                output.write(["ok": true])
                return
            }
            output.write(await execute(trimmed))
        }
    }

    /// A line of input as a command: without the spaces around it and the
    /// carriage return of a CRLF line (a script written on Windows, a serial
    /// console), which would make `status` an unknown `status\r`.
    /// A leading byte order mark (a command file saved as "UTF-8 with BOM") goes too.
    static func commandText(_ line: String) -> String {
        var text = Substring(line)
        while text.unicodeScalars.first == "\u{FEFF}" { text = Substring(text.unicodeScalars.dropFirst()) }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func execute(_ line: String) async -> [String: Any] {
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        do {
            switch (parts.first ?? "", parts.count) {
            case ("put", 3):
                let object: Any
                do {
                    object = try JSONSerialization.jsonObject(with: Data(parts[2].utf8), options: [.fragmentsAllowed])
                } catch {
                    // The parser's own reason, when it gives one ("Too many nested arrays or dictionaries …"),
                    // but for a lone surrogate escape, which it reports as an early end of the text.
                    let text = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
                    let reason = JSONSyntaxError.loneSurrogate(explaining: text ?? "", in: Data(parts[2].utf8)).map { ": \($0.message)" }
                        ?? text.map { ": \($0)" } ?? ""
                    if isEncrypted(parts[1]) { return Self.sealedValueNotJSON(key: parts[1], reason: text) }
                    return Self.invalid("put takes KEY and a JSON value (1234, \"text\", {\"a\":1}); '\(Self.excerpt(parts[2]))' is not JSON\(Self.bounded(reason))")
                }
                // What Foundation lets through and a scenario refuses: a member given twice (one dropped) or a trailing comma.
                if let syntax = JSONSyntaxError(validating: Data(parts[2].utf8)) {
                    if isEncrypted(parts[1]) { return Self.sealedValueNotJSON(key: parts[1], reason: nil) }
                    return Self.invalid("put takes KEY and a JSON value; '\(Self.excerpt(parts[2]))' is not JSON: \(Self.bounded(syntax.message))")
                }
                let bytes: [UInt8]
                if let encoding = rawEncoding(of: parts[1]) {
                    // As in a scenario: a string or data key stores a JSON string's bytes as they are.
                    guard let text = object as? String else {
                        return Self.invalid("'\(parts[1])' is a key of encoding \(encoding): put takes a JSON string (\"text\"), whose bytes are stored as they are")
                    }
                    bytes = Array(text.utf8)
                } else {
                    bytes = [UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .fragmentsAllowed]))
                }
                try store.setEncoded(bytes, forKey: parts[1])
                let version = try store.entryInfo(forKey: parts[1])?.version
                return ["ok": true, "key": parts[1], "version": version.map { "\($0)" } ?? ""]
            case ("get", 2):
                // What the file holds now, other processes' commits included (not only after the poll timer).
                try store.checkForExternalChanges()
                guard let bytes = try store.encodedValue(forKey: parts[1]) else {
                    return ["ok": true, "key": parts[1], "present": false, "value": NSNull()]
                }
                if let encoding = rawEncoding(of: parts[1]) {
                    guard let text = String(validating: bytes, as: UTF8.self) else {
                        throw SyncError(.typeMismatch, "the value of '\(parts[1])' (\(bytes.count) bytes of encoding \(encoding)) is not UTF-8 text, so the node cannot show it")
                    }
                    return ["ok": true, "key": parts[1], "present": true, "value": text]
                }
                guard let value = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
                    throw SyncError(.typeMismatch, "the value of '\(parts[1])' (\(bytes.count) bytes) is not JSON, so the node cannot show it; it was written with another serializer")
                }
                return ["ok": true, "key": parts[1], "present": true, "value": value]
            case ("delete", 2):
                try store.removeValue(forKey: parts[1])
                return ["ok": true, "key": parts[1]]
            case ("sync", 1):
                return ["ok": true, "queued": try peer.sync()]
            case ("request-manual", 1):
                // Asks the peer for its manual changes; its answer is a manual-request-answered event.
                return ["ok": true, "asked": peer.requestManualChanges()]
            case ("status", 1):
                return try status()
            case ("forget-peer", 2):
                // A phone's room for a newly paired watch (`too-many-peers`): node ids in hex, as `status` lists them.
                guard let node = UInt32(parts[1], radix: 16) else {
                    return Self.invalid("forget-peer takes a peer's node id in hex, as status lists them in peers")
                }
                return ["ok": true, "peer": String(node, radix: 16), "forgotten": try store.forgetPeer(node)]
            case ("renew-node-id", 1):
                // A store copied from another device (or restored from an older backup): its peers meet it anew.
                let old = store.nodeID
                return ["ok": true, "old": String(old, radix: 16), "node": String(try store.renewNodeID(), radix: 16)]
            case ("wait-idle", 2):
                // At most a year: `inf` or 1e300 seconds trapped converting to milliseconds.
                guard let seconds = Double(parts[1]), seconds >= 0, seconds <= 366 * 86_400 else {
                    return Self.invalid("wait-idle takes a number of seconds, from 0 to 31622400 (a year)")
                }
                guard live else {
                    return ["ok": false, "code": SyncError.Code.notConnected.rawValue,
                            "error": "wait-idle waits for a live session, and this node syncs only through its mailbox (no --listen or --connect); use status: its mailbox counts and pending"]
                }
                try await peer.waitUntilIdle(timeout: .milliseconds(Int(seconds * 1000)))
                return ["ok": true, "idle": true]
            default:
                // A known command with an argument missing (or one too many) is not an unknown command.
                // Only the command word is repeated: the rest may be a value, of an encrypted key too.
                let command = String((parts.first ?? "").unicodeScalars.prefix(40))
                if let usage = Self.usages[parts.first ?? ""] {
                    return Self.invalid("'\(command)' is not a whole command: use \(usage)")
                }
                return Self.invalid("unknown command '\(command)'; use \(Self.usages.values.sorted { Self.order($0) < Self.order($1) }.joined(separator: " | "))")
            }
        } catch let error as SyncError {
            return ["ok": false, "error": error.description, "code": error.code.rawValue]
        } catch let error as TransportError {
            return ["ok": false, "error": error.description, "code": error.code.rawValue]
        } catch is CancellationError {
            return ["ok": false, "error": "cancelled: the node is quitting", "code": "cancelled"]
        } catch {
            return ["ok": false, "error": "\(error)", "code": "failed"]
        }
    }

    /// The encoding of `key` when its values are bytes as they are (`string`,
    /// `data`), not JSON; nil for a JSON key or one the registry does not declare.
    func rawEncoding(of key: String) -> String? {
        guard let encoding = store.registry.descriptor(forEntry: key)?.encoding, encoding != "json" else { return nil }
        return encoding
    }

    /// Each command's usage, by its name (`quit` is taken before these).
    static let usages: [String: String] = [
        "put": "put KEY JSON", "get": "get KEY", "delete": "delete KEY", "sync": "sync", "request-manual": "request-manual",
        "status": "status", "wait-idle": "wait-idle SECONDS", "forget-peer": "forget-peer NODE", "renew-node-id": "renew-node-id",
        "quit": "quit",
    ]

    /// Where a usage goes in the list of every command: the order of the README.
    static func order(_ usage: String) -> Int {
        ["put", "get", "delete", "sync", "request-manual", "status", "wait-idle", "forget-peer", "renew-node-id", "quit"]
            .firstIndex { usage.hasPrefix($0 + " ") || usage == $0 } ?? Int.max
    }

    /// The answer to a line the node cannot take (an unknown command, a
    /// missing or malformed argument): code `invalid-command`.
    static func invalid(_ message: String) -> [String: Any] {
        ["ok": false, "error": message, "code": "invalid-command"]
    }

    func status() throws -> [String: Any] {
        let counters = store.syncCounters
        let pending = try store.pendingSummary()
        let cache = store.cacheStatistics
        let peers = try store.knownPeerDetails()
        var status: [String: Any] = [
            "ok": true, "role": store.role.rawValue, "node": String(store.nodeID, radix: 16), "connected": peer.isConnected,
            "peers": peers.map { String($0.node, radix: 16) },
            // The same peers with what the store knows of each (node ids in hex, as in `peers`).
            "peerDetails": peers.map { known -> [String: Any] in
                ["node": String(known.node, radix: 16), "role": known.role.rawValue, "pairing": known.pairingEpoch,
                 "lastSeen": known.lastSeenMilliseconds, "connected": known.isConnected]
            },
            "reachable": peer.isReachable,
            "entries": try store.allEntryInfo().filter { !$0.isDeleted }.count,
            "sent": counters.entriesSent, "received": counters.entriesReceived, "conflicts": counters.conflicts,
            "deferred": counters.deferred, "bytesSent": counters.bytesSent, "bytesReceived": counters.bytesReceived,
            "pending": ["automatic": pending.automatic, "manualReleased": pending.manualReleased, "manualWaiting": pending.manualWaiting],
            "cache": ["hits": cache.hits, "misses": cache.misses, "skippedWrites": cache.skippedWrites],
        ]
        if mailboxes.count == 1 {
            status["mailbox"] = Self.counts(of: mailboxes[0])
        } else if !mailboxes.isEmpty {
            // A phone with several watches: one object per pairing's mailbox, in the order given.
            status["mailboxes"] = mailboxes.map { mailbox in Self.counts(of: mailbox).merging(["directory": mailbox.directory]) { kept, _ in kept } }
        }
        return status
    }

    /// A mailbox's message counts, or the error that keeps them from being read
    /// (its directory gone, say): reported in their place, not as the command's failure.
    static func counts(of mailbox: Mailbox) -> [String: Any] {
        do {
            return ["outgoing": try mailbox.outgoingCount(), "incoming": try mailbox.incomingCount(), "refused": try mailbox.refusedFiles().count]
        } catch {
            return ["error": (error as? SyncError)?.description ?? "\(error)"]
        }
    }

    static func json(_ event: SyncEvent) -> [String: Any] {
        switch event {
        case .connected(let node, let role): ["event": "connected", "peer": String(node, radix: 16), "role": role.rawValue]
        case .disconnected(let reason): ["event": "disconnected", "reason": reason]
        case .keyMismatch(let keys): ["event": "key-mismatch", "keys": keys]
        case .batchSent(let n, let m, let entries): ["event": "batch-sent", "number": n, "total": m, "entries": entries]
        case .received(let entries, let applied): ["event": "received", "entries": entries, "applied": applied]
        case .chunk(let key, let index, let count, let outgoing): ["event": "chunk", "key": key, "index": index, "count": count, "direction": outgoing ? "out" : "in"]
        case .conflictResolved(let key, let winner, let rule): ["event": "conflict", "key": key, "winner": winner.rawValue, "rule": rule.rawValue]
        case .deferred(let key, let size): ["event": "deferred", "key": key, "size": size]
        case .versionRefused(let key, let ahead): ["event": "version-refused", "key": key, "aheadMs": ahead]
        case .manualRequestReceived(let accepted, let released): ["event": "manual-request-received", "accepted": accepted, "released": released]
        case .manualRequestAnswered(let accepted, let released): ["event": "manual-request-answered", "accepted": accepted, "released": released]
        case .idle: ["event": "idle"]
        case .queuedDelivery(let read, let applied, let posted, let acknowledged):
            ["event": "queued", "read": read, "applied": applied, "posted": posted, "acknowledged": acknowledged]
        case .error(let error): ["event": "error", "error": error.description]
        case .eventsMissed(let count): ["event": "events-missed", "count": count]
        }
    }
}

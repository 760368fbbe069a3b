import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Seeded fuzzing of *established* sessions (the handshake fuzz in
/// `WireGoldenTests.mutatedMessagesNeverCrashTheSession` cannot get past the
/// hello, so it never reaches apply).
///
/// A phone and a watch store write values (small, encrypted, read-only copies,
/// family members, deletes, and values over 100 KB that travel in chunks), then
/// run session after session over a hand-driven link. Once both ends are
/// established, some of the real batches, acks, chunks and chunk acks in flight
/// are mutated (bit flips, truncation, field changes: huge counts, out-of-range
/// indexes, extreme versions, unknown or forbidden keys, wrong encodings) or
/// delivered twice, late, out of order, or from an earlier session.
///
/// Invariants: nothing traps, both stores pass `PRAGMA integrity_check` after
/// every session and stay usable (a local write reads back). Every fuzzed
/// delivery is counted as applied (it changed the receiver's store), refused
/// (the session failed, or entries were rejected) or ignored; all three must
/// occur, so the fuzz demonstrably reaches apply. The counts are reported, not
/// pinned: validation added later may move inputs from applied to refused.
@Suite(.timeLimit(.minutes(5))) struct SessionFuzzTests {
    @Test func mutatedTrafficInEstablishedSessions() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SYNCENGINE_SESSION_FUZZ_SEED"] ?? "") ?? 20_261_201
        let sessions = Int(ProcessInfo.processInfo.environment["SYNCENGINE_SESSION_FUZZ_SESSIONS"] ?? "") ?? 200
        let replay = "replay: SYNCENGINE_SESSION_FUZZ_SEED=\(seed) swift test --filter mutatedTrafficInEstablishedSessions"
        let fuzzer = try SessionFuzzer(seed: seed)
        for session in 0..<sessions {
            try await fuzzer.writeSomething(session: session)
            fuzzer.runSession()
            let problems = try await fuzzer.checkStores(session: session)
            #expect(problems.isEmpty, "session \(session): \(problems.joined(separator: "; ")) (seed \(seed); \(replay))")
            if !problems.isEmpty { break }
        }
        print("established-session fuzz, seed \(seed): \(fuzzer.report) (\(replay))")
        let total = fuzzer.total
        #expect(total.applied > 0, "no fuzzed message was applied (seed \(seed))")
        #expect(total.refused > 0, "no fuzzed message was refused (seed \(seed))")
        #expect(total.ignored > 0, "no fuzzed message was ignored (seed \(seed))")
        for type in [SyncMessage.MessageType.batch, .ack, .chunk, .chunkAck] {
            #expect(fuzzer.counts[type.rawValue, default: Counts()].all > 0, "no \(type) was fuzzed (seed \(seed))")
        }
        #expect(fuzzer.counts[SyncMessage.MessageType.chunk.rawValue, default: Counts()].applied > 0,
                "no fuzzed chunk was staged or applied (seed \(seed))")
    }

    /// A paired peer sends an entry whose version is `Int64.max`. Whether the
    /// entry is applied or refused, nothing traps and local writes go on.
    /// Found by the fuzz above: the clock used to observe the version, and the
    /// next local write overflowed in `HybridLogicalClock.now()` (`last + 1`).
    @Test func remoteVersionAtInt64MaxDoesNotBreakLocalWrites() async throws {
        let pair = try Pair()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        let hostile = SyncMessage.batch(.init(id: 1, entries: [WireEntry(
            key: TestKeys.steps.name, version: HLCTimestamp(packed: Int64.max, node: pair.phone.nodeID),
            base: .zero, deleted: false, encoding: "json", value: Array("5".utf8))])).frame()
        _ = link.b.receive(hostile, now: link.now)
        try await pair.watch.set(6, for: TestKeys.daily["after"])
        #expect(try pair.watch.storedValue(for: TestKeys.daily["after"]) == 6)
        try await pair.watch.set(7, for: TestKeys.steps)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 7, "a local write after a hostile version still wins locally")
        #expect(integrityCheck(pair.watch.path) == "ok")
    }
}

/// How fuzzed deliveries of one kind of message ended.
struct Counts: CustomStringConvertible {
    var applied = 0
    var refused = 0
    var ignored = 0
    var all: Int { applied + refused + ignored }
    var description: String { "\(applied) applied, \(refused) refused, \(ignored) ignored" }
}

/// `PRAGMA integrity_check` of the database file at `path`, on a connection of its own ("ok" when sound).
func integrityCheck(_ path: String) -> String {
    var db: OpaquePointer?
    defer { sqlite3_close(db) }
    guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
        return "cannot open: \(String(cString: sqlite3_errmsg(db)))"
    }
    var stmt: OpaquePointer?
    defer { sqlite3_finalize(stmt) }
    guard sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nil) == SQLITE_OK else {
        return "cannot check: \(String(cString: sqlite3_errmsg(db)))"
    }
    var rows: [String] = []
    while sqlite3_step(stmt) == SQLITE_ROW {
        rows.append(sqlite3_column_text(stmt, 0).map { String(cString: $0) } ?? "")
    }
    return rows.joined(separator: "; ")
}

final class SessionFuzzer {
    let pair: Pair
    var random: SeededRandom
    var now: Int64 = 10_000
    /// Fuzzed deliveries by the original frame's type.
    var counts: [UInt8: Counts] = [:]
    /// Real frames of earlier sessions, replayed into later ones.
    var stale: [Frame] = []
    var sessionsEstablished = 0
    var sessionsFailed = 0
    private var probe = 0

    /// The keys the phone and the watch write (every availability that replicates, the resolver key, a family).
    static let registered = ["health:daily:steps", "profile:name", "token", "face", "units", "draft", "blob", "tags", "secret"]

    init(seed: UInt64) throws {
        random = SeededRandom(seed: seed)
        pair = try Pair()
    }

    var total: Counts {
        counts.values.reduce(into: Counts()) {
            $0.applied += $1.applied
            $0.refused += $1.refused
            $0.ignored += $1.ignored
        }
    }

    var report: String {
        let names: [(UInt8, String)] = [(2, "batch"), (3, "ack"), (4, "chunk"), (5, "chunkAck"), (1, "hello"), (6, "error")]
        let parts = names.compactMap { type, name in counts[type].map { "\(name): \($0)" } }
        return "\(total.all) fuzzed deliveries in \(sessionsEstablished) established sessions (\(sessionsFailed) ended by a failure): "
            + "\(total); by message: \(parts.joined(separator: "; "))"
    }

    // MARK: traffic

    /// A few local writes on each side, so every session has batches, and sometimes chunks, to send.
    func writeSomething(session: Int) async throws {
        pair.phoneClock.advance(by: 1_000)
        pair.watchClock.advance(by: 1_000)
        let phone = pair.phone, watch = pair.watch
        for _ in 0..<(1 + Int(random.next(below: 4))) {
            let n = Int(random.next(below: 1_000))
            switch random.next(below: 8) {
            case 0: try await phone.set(n, for: TestKeys.steps)
            case 1: try await phone.set(["p\(n)"], for: TestKeys.tags)
            case 2: try await phone.set("secret-\(n)", for: TestKeys.secret)
            case 3: try await phone.set("units-\(n)", for: TestKeys.units)  // a read-only copy on the watch
            case 4: try await phone.set("name-\(n)", for: TestKeys.name)    // manual
            case 5: try await phone.set(n, for: TestKeys.daily["d\(n % 20)"])
            case 6: try await phone.remove(TestKeys.daily["d\(n % 20)"])
            default: try await watch.set(n, for: TestKeys.daily["w\(n % 20)"])
            }
        }
        if random.nextBool(probability: 0.5) { try await watch.set(["w\(session)"], for: TestKeys.tags) }
        if session % 3 == 0 {
            // Over the automatic limit: deferred, then sent in 64 KB chunks by the manual sync below.
            let size = SyncPolicy.automaticLimit + 1 + Int(random.next(below: 200_000))
            let byte = UInt8(truncatingIfNeeded: session)
            try await (session % 2 == 0 ? phone : watch).set(Data(repeating: byte, count: size), for: TestKeys.blob)
        }
        if random.nextBool(probability: 0.7) { try phone.requestManualSync() }
        if random.nextBool(probability: 0.5) { try watch.requestManualSync() }
    }

    /// One session over a hand-driven link: honest until both ends are
    /// established, then a share of the deliveries is fuzzed.
    func runSession() {
        let configuration = ReplicationConfiguration(pairingEpoch: "fuzz")
        let phone = ReplicationEndpoint(store: pair.phone, configuration: configuration)
        let watch = ReplicationEndpoint(store: pair.watch, configuration: configuration)
        var toWatch = phone.start(now: now)
        var toPhone = watch.start(now: now)
        var established = false
        var quietTicks = 0
        for _ in 0..<400 {
            if phone.failure != nil || watch.failure != nil { break }
            if toWatch.isEmpty && toPhone.isEmpty {
                toWatch += phone.pump(now: now)
                toPhone += watch.pump(now: now)
            }
            if toWatch.isEmpty && toPhone.isEmpty {
                // Lost (mutated) frames come back by retransmission.
                guard quietTicks < 3 else { break }
                quietTicks += 1
                now += 10_000
                toWatch += phone.tick(now: now)
                toPhone += watch.tick(now: now)
                continue
            }
            quietTicks = 0
            now += 10
            let toTheWatch = toPhone.isEmpty || (!toWatch.isEmpty && random.nextBool(probability: 0.5))
            let receiver = toTheWatch ? watch : phone
            var queue = toTheWatch ? toWatch : toPhone
            // Mostly in order; sometimes a later frame overtakes.
            let index = established && queue.count > 1 && random.nextBool(probability: 0.1) ? Int(random.next(below: UInt64(queue.count))) : 0
            let frame = queue.remove(at: index)
            if toTheWatch { toWatch = queue } else { toPhone = queue }
            if stale.count < 256 { stale.append(frame) } else { stale[Int(random.next(below: 256))] = frame }

            var deliveries: [(frame: Frame, countAs: UInt8?)] = [(frame, nil)]
            if established && random.nextBool(probability: 0.35) { deliveries = fuzz(frame) }
            for delivery in deliveries where receiver.failure == nil {
                let out = delivery.countAs.map { deliverCounted(delivery.frame, as: $0, to: receiver) } ?? receiver.receive(delivery.frame, now: now)
                if toTheWatch { toPhone += out } else { toWatch += out }
            }
            if !established && phone.isEstablished && watch.isEstablished {
                established = true
                sessionsEstablished += 1
            }
        }
        if phone.failure != nil || watch.failure != nil { sessionsFailed += 1 }
    }

    /// Delivers one fuzzed frame and counts how it ended (under the message
    /// type it was made from), by what it did to the receiver.
    private func deliverCounted(_ frame: Frame, as type: UInt8, to receiver: ReplicationEndpoint) -> [Frame] {
        let store = (receiver.port as! SQLiteReplicationPort).store
        let before = store.syncCounters
        let pendingBefore = (try? store.pendingSummary().total) ?? 0
        let out = receiver.receive(frame, now: now)
        let after = store.syncCounters
        let pendingAfter = (try? store.pendingSummary().total) ?? 0
        let acks = out.compactMap { try? SyncMessage(frame: $0).asAck }
        let refused = receiver.failure != nil || after.entriesRejected > before.entriesRejected || acks.contains { !$0.rejected.isEmpty }
        let applied = acks.contains { $0.applied > 0 } || after.chunksReceived > before.chunksReceived || pendingAfter < pendingBefore
        if refused {
            counts[type, default: Counts()].refused += 1
        } else if applied {
            counts[type, default: Counts()].applied += 1
        } else {
            counts[type, default: Counts()].ignored += 1
        }
        return out
    }

    // MARK: mutations

    /// What is delivered instead of `frame`: a mutated copy, the frame twice, an
    /// old frame before it, or it under another type. Fuzzed deliveries carry
    /// the message type they are counted under.
    private func fuzz(_ frame: Frame) -> [(frame: Frame, countAs: UInt8?)] {
        let type = frame.type
        switch random.next(below: 20) {
        case 0..<9:
            if let mutated = mutateFields(frame) { return [(mutated, type)] }
            return [(flipBits(frame), type)]
        case 9, 10, 11: return [(flipBits(frame), type)]
        case 12:
            var cut = frame
            cut.payload = Array(frame.payload.prefix(Int(random.next(below: UInt64(frame.payload.count + 1)))))
            return [(cut, type)]
        case 13:
            var longer = frame
            longer.payload += (0..<(1 + random.next(below: 8))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            return [(longer, type)]
        case 14, 15: return [(frame, nil), (frame, type)]  // duplicated
        case 16, 17:
            let old = stale[Int(random.next(below: UInt64(stale.count)))]
            return [(old, old.type), (frame, nil)]  // a frame of an earlier moment or session, then the real one
        default:
            var retyped = frame
            retyped.type = [1, 2, 3, 4, 5, 6, 7, 0xEE][Int(random.next(below: 8))]
            return [(retyped, type)]
        }
    }

    private func flipBits(_ frame: Frame) -> Frame {
        var flipped = frame
        for _ in 0..<(1 + random.next(below: 4)) where !flipped.payload.isEmpty {
            let at = Int(random.next(below: UInt64(flipped.payload.count)))
            flipped.payload[at] ^= UInt8(truncatingIfNeeded: 1 << random.next(below: 8))
        }
        return flipped
    }

    /// Decodes `frame`, changes one field to a hostile value, encodes it again (nil for messages it does not change).
    private func mutateFields(_ frame: Frame) -> Frame? {
        guard let message = try? SyncMessage(frame: frame) else { return nil }
        switch message {
        case .batch(var batch):
            if batch.entries.isEmpty || random.nextBool(probability: 0.15) {
                switch random.next(below: 4) {
                case 0: batch.id = [0, UInt64.max, batch.id &+ 1, random.next()][Int(random.next(below: 4))]
                case 1: batch.entries = []
                case 2: batch.entries = (0..<500).map { i in entry(key: "steps:day:fz\(i)", value: Array("\(i)".utf8)) }
                default: batch.entries += batch.entries + batch.entries.reversed()
                }
            } else {
                let i = Int(random.next(below: UInt64(batch.entries.count)))
                mutate(&batch.entries[i])
            }
            return SyncMessage.batch(batch).frame()
        case .ack(var ack):
            switch random.next(below: 5) {
            case 0: ack.batchID = ack.batchID &+ 1
            case 1: ack.batchID = [0, UInt64.max, random.next()][Int(random.next(below: 3))]
            case 2: ack.applied = Int(UInt32.max)
            case 3: ack.rejected += (0..<(1 + Int(random.next(below: 1_000)))).map { .init(key: "k\($0)", code: "unknown-key") }
            default: ack.rejected = [.init(key: String(repeating: "x", count: 1_024), code: String(repeating: "y", count: 128))]
            }
            return SyncMessage.ack(ack).frame()
        case .chunk(var chunk):
            switch random.next(below: 10) {
            case 0: chunk.index = chunk.count - 1  // the last chunk early: announced as complete with a gap
            case 1:
                chunk.count = Int(UInt32.max)
                chunk.index = Int(random.next(below: UInt64(UInt32.max)))
            case 2: chunk.count = 1 + chunk.index  // fewer chunks than the value needs
            case 3: chunk.totalSize = [Int(UInt32.max), chunk.totalSize + 1, 0][Int(random.next(below: 3))]
            case 4: chunk.totalChecksum ^= 1
            case 5: chunk.checksum ^= 0x8000_0000
            case 6:
                // Corrupt bytes that still match their own checksum: only the whole value's checksum can tell.
                if !chunk.bytes.isEmpty { chunk.bytes[Int(random.next(below: UInt64(chunk.bytes.count)))] ^= 0xFF }
                chunk.checksum = Checksum.crc32(chunk.bytes)
            case 7: chunk.bytes = []
            default: mutate(&chunk.entry)
            }
            return SyncMessage.chunk(chunk).frame()
        case .chunkAck(var ack):
            switch random.next(below: 5) {
            case 0: ack.index = Int(random.next(below: UInt64(UInt32.max)))
            case 1: ack.version = extremeVersion(observed: false)
            case 2: ack.key = ["blob", "no:such:key", "health:daily:steps", ""][Int(random.next(below: 4))]
            case 3: ack.complete.toggle()
            default: ack.index += 1
            }
            return SyncMessage.chunkAck(ack).frame()
        case .caughtUp(var notice):
            notice.id = [0, UInt64.max, notice.id &+ 1, random.next()][Int(random.next(below: 4))]
            return SyncMessage.caughtUp(notice).frame()
        case .manualRequest(var request):
            request.id = [0, UInt64.max, random.next()][Int(random.next(below: 3))]
            return SyncMessage.manualRequest(request).frame()
        case .manualReply(var reply):
            reply.released = Int(UInt32.max)
            reply.accepted = random.nextBool(probability: 0.5)
            return SyncMessage.manualReply(reply).frame()
        case .receipt(var receipt):
            switch random.next(below: 3) {
            case 0: receipt.receivedThrough = Int64.max
            case 1: receipt.acknowledgedThrough = Int64.max
            default: receipt.id = [0, UInt64.max, random.next()][Int(random.next(below: 3))]
            }
            return SyncMessage.receipt(receipt).frame()
        case .hello, .error, .rebaseline:
            return nil
        }
    }

    private func entry(key: String, value: [UInt8]) -> WireEntry {
        let version = HLCTimestamp(physicalMilliseconds: pair.phoneClock.nowMilliseconds() + 1, counter: 0, node: pair.phone.nodeID)
        return WireEntry(key: key, version: version, base: .zero, deleted: false, encoding: "json", value: value)
    }

    /// Versions at the edges: far past, far future, the extremes of the packed value.
    private func extremeVersion(observed: Bool) -> HLCTimestamp {
        let node = UInt32(truncatingIfNeeded: random.next())
        switch random.next(below: 5) {
        case 0: return HLCTimestamp(packed: Int64.max, node: node)
        case 1: return HLCTimestamp(packed: Int64.min, node: node)
        case 2: return HLCTimestamp(packed: 0, node: 0)
        case 3: return HLCTimestamp(physicalMilliseconds: (Int64.max >> 16) - 1, counter: 0, node: node)  // the year 6429
        default: return HLCTimestamp(packed: -1, node: .max)
        }
    }

    private func mutate(_ entry: inout WireEntry) {
        switch random.next(below: 12) {
        case 0: entry.version = extremeVersion(observed: true)
        case 1: entry.base = extremeVersion(observed: false)
        case 2:
            // Newer by a little: a plausible write the receiver should take.
            entry.version = HLCTimestamp(packed: entry.version.packed &+ Int64(1 + random.next(below: 1 << 10)), node: entry.version.node)
        case 3: entry.key = ["no:such:key", "", "token", "face", "draft", String(repeating: "k", count: 1_024)][Int(random.next(below: 6))]
        case 4: entry.key = "steps:day:fz\(random.next(below: 50))"  // a family member never written
        case 5: entry.encoding = ["data", "json", "", "utf8-bogus"][Int(random.next(below: 4))]
        case 6: entry.value = (0..<random.next(below: 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }  // not JSON
        case 7: entry.value = [UInt8](repeating: 0x31, count: SyncPolicy.automaticLimit + 1 + Int(random.next(below: 100_000)))  // large, inline
        case 8:
            entry.deleted.toggle()
            if !entry.deleted && entry.value == nil { entry.value = Array("1".utf8) }
        case 9: entry.value = entry.deleted ? nil : []
        case 10:
            entry.version = HLCTimestamp(packed: entry.version.packed &+ 1, node: entry.version.node)
            entry.base = entry.version  // a base that claims to have seen itself
        default: entry.version = HLCTimestamp(packed: entry.version.packed, node: entry.version.node ^ 0xFFFF_FFFF)
        }
    }

    // MARK: invariants

    /// Problems with either store after a session: integrity, readability, and a local write that must read back.
    func checkStores(session: Int) async throws -> [String] {
        var problems: [String] = []
        for (name, store) in [("phone", pair.phone), ("watch", pair.watch)] {
            let integrity = integrityCheck(store.path)
            if integrity != "ok" { problems.append("\(name) integrity_check: \(integrity)") }
            for info in try store.allEntryInfo() {
                do {
                    _ = try store.encodedValue(forKey: info.key)
                } catch {
                    problems.append("\(name) cannot read \(info.key): \(error)")
                }
            }
            probe += 1
            let value = "probe-\(session)-\(probe)"
            try await store.set(value, for: TestKeys.draft)
            if try store.storedValue(for: TestKeys.draft) != value { problems.append("\(name): a local write did not read back") }
        }
        return problems
    }
}

import Foundation
import PropertyBased
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

/// Cases per property (every property, the TCP one included): 500 by default;
/// `SYNCENGINE_PROPERTY_CASES=100000` for the long run before a release.
let propertyCases = Int(ProcessInfo.processInfo.environment["SYNCENGINE_PROPERTY_CASES"] ?? "") ?? 500

@Suite struct PropertyTests {
    /// Convergence, placement, no resurrection, durability and HLC monotonicity
    /// over random histories with loss, duplication, reordering, disconnects,
    /// restarts and skew: the end state equals the reference model.
    @Test func randomHistoriesMatchTheModel() async {
        await propertyCheck(count: propertyCases, input: Step.histories) { steps in
            await Task.yield()  // one case at a time: let the tests beside it run
            let failure = PropertyHarness.check(steps)
            #expect(failure == nil, "\(failure ?? ""); history: \(steps)")
        }
    }

    /// Applying any batch twice, or a set of batches in any order, gives the same state.
    @Test func applyIsIdempotentAndOrderIndependent() async throws {
        let registry = try KeyRegistry(descriptors: PropertyHarness.keys)
        let entryGen = Gen.int(in: 0...9_999).array(of: 1...12)
        await propertyCheck(count: propertyCases, input: entryGen) { codes in
            await Task.yield()  // one case at a time: let the tests beside it run
            // Two nodes, each writing a causal chain (every write's base is that node's
            // previous version of the key), delivered to a third store in two orders.
            // The resolver key's values only grow along each node's chain: resolvers are joins (max here).
            var last: [String: [UInt32: HLCTimestamp]] = [:]
            var maxSoFar: [UInt32: Int] = [:]
            let entries = codes.enumerated().map { index, code -> WireEntry in
                let key = ["a.auto", "a.manual", "a.max", "a.big"][code % 4]
                let node: UInt32 = code % 3 == 0 ? 0x1001 : 0x2002
                let version = HLCTimestamp(physicalMilliseconds: Int64(1_000 + 3 * index + (code / 4) % 3), counter: 0, node: node)
                let base = last[key]?[node] ?? .zero
                last[key, default: [:]][node] = version
                let deleted = code % 11 == 0 && key != "a.max"
                var value = code % 97
                if key == "a.max" {
                    value += maxSoFar[node, default: 0]
                    maxSoFar[node] = value
                }
                return WireEntry(key: key, version: version, base: base, deleted: deleted, encoding: "json",
                                 value: deleted ? nil : Array(String(value).utf8))
            }
            do {
                let folder = TempFolder()
                let inOrder = try SyncStore(path: folder.file("a"), role: .watch, registry: registry)
                let shuffled = try SyncStore(path: folder.file("b"), role: .watch, registry: registry)
                for entry in entries { _ = try inOrder.applyRemote([entry], peerRole: .phone, mismatched: []) }
                for entry in (entries.reversed() + entries) { _ = try shuffled.applyRemote([entry], peerRole: .phone, mismatched: []) }
                for key in ["a.auto", "a.manual", "a.max", "a.big"] {
                    #expect(try inOrder.encodedValue(forKey: key) == shuffled.encodedValue(forKey: key), "\(key) for \(codes)")
                    #expect(try inOrder.entryInfo(forKey: key)?.version == shuffled.entryInfo(forKey: key)?.version)
                }
            } catch {
                Issue.record("apply failed: \(error) for \(codes)")
            }
        }
    }

    /// Versions issued by one node only grow, whatever the skew and whatever it observes.
    @Test func hlcIsMonotonicUnderSkew() async {
        await propertyCheck(count: propertyCases, input: Gen.int(in: -600_000...600_000).array(of: 1...40)) { moves in
            await Task.yield()  // one case at a time: let the tests beside it run
            let wall = ManualClock(now: 10_000_000)
            let clock = HybridLogicalClock(node: 1, physical: wall)
            var last = HLCTimestamp.zero
            for move in moves {
                if move % 2 == 0 { wall.setSkew(Int64(move)) } else { clock.observe(HLCTimestamp(physicalMilliseconds: 10_000_000 + Int64(move), counter: 0, node: 2)) }
                let next = try clock.now()
                #expect(next > last)
                last = next
            }
        }
    }

    /// A queued batch's position, coded in generation `g`, is of an older
    /// generation than `g + k` for 0 < k < 2^13, and never than `g` itself or
    /// `g - k` (a newer batch): the watch passes over only what a live
    /// notice superseded, whatever the wrap of the 14-bit generation.
    @Test func queuedGenerationsAreToldApartUpToHalfTheirRange() async {
        await propertyCheck(count: propertyCases, input: Gen.int(in: 0...Int(Int32.max)).array(of: 3...3)) { numbers in
            let half = QueuedStreamPosition.generations / 2
            let generation = Int64(numbers[0]), position = Int64(numbers[1]) << 16
            let later = Int64(numbers[2]) % (half - 1) + 1
            let coded = try! QueuedStreamPosition.coded(position, generation: generation)
            #expect(QueuedStreamPosition.isOfOlderGeneration(coded, than: generation + later), "\(numbers)")
            #expect(!QueuedStreamPosition.isOfOlderGeneration(coded, than: generation), "\(numbers)")
            let newer = try! QueuedStreamPosition.coded(position, generation: generation + later)
            #expect(!QueuedStreamPosition.isOfOlderGeneration(newer, than: generation), "\(numbers)")
        }
    }

    /// encode → decode is the identity for every message type.
    @Test func wireRoundTrip() async {
        await propertyCheck(count: propertyCases, input: Gen.int(in: 0...Int(UInt32.max)).array(of: 1...8)) { numbers in
            await Task.yield()  // one case at a time: let the tests beside it run
            let n = numbers[0]
            let v = HLCTimestamp(packed: Int64(n) << 8, node: UInt32(truncatingIfNeeded: n))
            let entries = numbers.map { WireEntry(key: "k\($0)", version: v, base: .zero, deleted: $0 % 5 == 0, encoding: "json",
                                                  value: $0 % 5 == 0 ? nil : Array(String($0).utf8)) }
            let messages: [SyncMessage] = [
                .hello(.init(protocolRange: 1...UInt16(1 + n % 3), node: UInt32(truncatingIfNeeded: n), role: n % 2 == 0 ? .phone : .watch,
                             isReply: n % 3 == 0, pairingEpoch: "e\(n)", registryFingerprint: Array(String(n).utf8),
                             declarations: numbers.map { "k\($0)|all|manual|json|single|lww" },
                             partialTransfers: [PartialTransfer(key: "k", version: v, received: n % 100)])),
                .batch(.init(id: UInt64(n), entries: entries)),
                .ack(.init(batchID: UInt64(n), applied: n % 1000, rejected: numbers.map { .init(key: "k\($0)", code: "c") })),
                .chunk(.init(entry: WireEntry(key: "k", version: v, base: v, deleted: false, encoding: "data", value: []),
                             totalSize: n % 10_000, totalChecksum: UInt32(truncatingIfNeeded: n), index: 0, count: 1 + n % 9,
                             checksum: UInt32(truncatingIfNeeded: n * 3), bytes: Array(String(n).utf8))),
                .chunkAck(.init(key: "k\(n)", version: v, index: n % 50, complete: n % 2 == 0)),
                .error(.init(code: "c\(n)", message: "m\(n)")),
            ]
            for message in messages {
                let codec = FrameCodec()
                #expect((try? SyncMessage(frame: codec.decode(codec.encode(message.frame())))) == message)
            }
        }
    }

    /// A deliberately broken engine (deletes not replicated, or the last
    /// arrival winning a conflict) is caught against the reference model, and
    /// the library shrinks the failing history it found to at most 3 steps.
    ///
    /// The failures are expected (`withKnownIssue`); the histories the body saw
    /// fail are recorded: the first is the one found, the last the shrunk one
    /// (the library runs the body once more with its final counterexample).
    /// The library shrinks one field of one step at a time, so about one search
    /// in ten stops at a 4-step history (`set(a.manual)`, `sync()`, `deliverAll`,
    /// `remove(a.manual)`: the key cannot move in both writes at once); a new
    /// search then runs, up to 5.
    @Test(.shrinking, arguments: [TestingFaults(skipTombstones: true), TestingFaults(lastArrivalWins: true)])
    func injectedFaultIsCaughtAndShrunk(fault: TestingFaults) async throws {
        var searches: [(found: [Step], shrunk: [Step], candidates: Int)] = []
        while searches.count < 5 && (searches.last?.shrunk.count ?? .max) > 3 {
            var failing: [[Step]] = []
            await withKnownIssue("the engine is broken on purpose (\(fault.testDescription)): the model check fails") {
                await propertyCheck(count: 5_000, input: Step.histories) { steps in
                    await Task.yield()  // one case at a time: let the tests beside it run
                    let failure = PropertyHarness.check(steps, faults: fault)
                    if failure != nil { failing.append(steps) }
                    #expect(failure == nil, "\(failure ?? "")")
                }
            }
            let found = try #require(failing.first, "the injected fault \(fault.testDescription) was never caught")
            searches.append((found, try #require(failing.last), failing.count - 1))
        }
        let best = try #require(searches.min { $0.shrunk.count < $1.shrunk.count })
        let failure = PropertyHarness.check(best.shrunk, faults: fault)
        print("fault \(fault.testDescription) caught: \(failure ?? "")")
        for (n, search) in searches.enumerated() {
            print("""
                  search \(n + 1): found \(search.found.count) steps: \(search.found)
                    shrunk by the library to \(search.shrunk.count) steps (\(search.candidates) failing candidates on the way): \(search.shrunk)
                """)
        }
        #expect(failure != nil, "the shrunk history still fails")
        #expect(best.shrunk.count <= 3, "the counterexample shrank to at most 3 steps: \(best.shrunk)")
        #expect(best.shrunk.count <= best.found.count)
        #expect(PropertyHarness.check(best.shrunk) == nil, "the same history passes without the fault")
    }
}

extension TestingFaults: CustomTestStringConvertible {
    public var testDescription: String { skipTombstones ? "skipTombstones" : lastArrivalWins ? "lastArrivalWins" : "none" }
}

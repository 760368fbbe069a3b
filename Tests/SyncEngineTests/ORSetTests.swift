import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@_spi(Benchmarks) import SyncTransport
import Testing

enum ORSetKeys {
    static let lists = Key<ORSet<String>>("lists", default: ORSet(), resolver: .observedRemove())
    static let all: [any KeyDeclaration] = TestKeys.all + [lists]
}

@Suite(.timeLimit(.minutes(5))) struct ORSetTests {
    static let phone: UInt32 = 1, watch: UInt32 = 2

    /// Different elements added on one device and removed on the other: both edits survive, in either merge order.
    @Test func concurrentAddAndRemoveOfDifferentElementsBothSurvive() {
        let shared = ORSet(["milk", "eggs"], by: ORSetTests.phone)
        var onPhone = shared, onWatch = shared
        onPhone.insert("bread", by: ORSetTests.phone)
        onWatch.remove("eggs")
        #expect(onPhone.merging(onWatch).elements == ["milk", "bread"])
        #expect(onWatch.merging(onPhone) == onPhone.merging(onWatch))
    }

    /// A removal of what both devices had sticks (`.union()` brings it back);
    /// a concurrent re-insertion the removal did not see wins; a removal that
    /// saw the re-insertion sticks again.
    @Test func observedRemovalsStickAndConcurrentAdditionsWin() {
        let shared = ORSet(["milk", "eggs"], by: ORSetTests.phone)
        var onWatch = shared
        onWatch.remove("milk")
        #expect(shared.merging(onWatch).elements == ["eggs"], "the phone's untouched copy does not resurrect milk")
        #expect(onWatch.merging(shared).elements == ["eggs"])
        let union = ConflictResolver<[String]>.union()
        #expect(union.merge(["eggs", "milk"], ["eggs"]) == ["eggs", "milk"], "what union does instead")

        var onPhone = shared
        onPhone.insert("milk", by: ORSetTests.phone)  // again, concurrently with the watch's removal
        let merged = onPhone.merging(onWatch)
        #expect(merged.elements == ["milk", "eggs"], "an insertion the removal never saw wins")
        #expect(onWatch.merging(onPhone) == merged)

        var after = merged
        after.remove("milk")
        #expect(after.merging(onPhone).elements == ["eggs"], "a removal that saw every insertion sticks")
        #expect(after.merging(merged).merging(shared).elements == ["eggs"])
    }

    /// Equal sets encode to equal bytes however they were built (hashing
    /// order differs between processes), and decode back.
    @Test func equalSetsEncodeToEqualBytes() throws {
        let serializer = ValueSerializer<ORSet<String>>.json
        let words = (0..<40).map { "w\($0)" }
        var a = ORSet(words, by: 7)
        a.remove("w3")
        // The same set, its members listed in another order.
        let members = words.enumerated().filter { $0.element != "w3" }.reversed()
            .map { #"{"element":"\#($0.element)","tags":[[7,\#($0.offset + 1)]]}"# }
        let b = try serializer.decode(Array(#"{"elements":[\#(members.joined(separator: ","))],"removed":[[7,4]]}"#.utf8))
        #expect(a == b)
        #expect(try serializer.encode(a) == serializer.encode(b))
        #expect(try serializer.decode(serializer.encode(a)) == a)
        #expect(throws: SyncError.self) { _ = try serializer.decode(Array(#"{"elements":[{"element":"x","tags":[[1]]}],"removed":[]}"#.utf8)) }
    }

    /// A peer's value whose tag counter is the largest 64-bit number decoded,
    /// and the next insertion overflowed it (a trap in the app's own call).
    /// Counters past `Tag.maxCounter` are refused; at it, the next insertion
    /// stays within it.
    @Test func aTagCounterPastTheBoundIsRefusedAndNoInsertionOverflows() throws {
        let serializer = ValueSerializer<ORSet<String>>.json
        for counter in ["18446744073709551615", "\(ORSet<String>.Tag.maxCounter + 1)"] {
            let hostile = Array(#"{"elements":[{"element":"x","tags":[[2,\#(counter)]]}],"removed":[]}"#.utf8)
            #expect(throws: SyncError.self) { _ = try serializer.decode(hostile) }
            let removed = Array(#"{"elements":[],"removed":[[2,\#(counter)]]}"#.utf8)
            #expect(throws: SyncError.self) { _ = try serializer.decode(removed) }
        }
        let atBound = Array(#"{"elements":[{"element":"x","tags":[[2,\#(ORSet<String>.Tag.maxCounter)]]}],"removed":[]}"#.utf8)
        var set = try serializer.decode(atBound)
        set.insert("y", by: ORSetTests.watch)
        #expect(set.elements == ["x", "y"])
        #expect(try serializer.decode(serializer.encode(set)) == set)
    }

    /// Merge is a join: commutative, associative, idempotent, over seeded
    /// random histories of three devices editing copies of one set.
    /// A peer's set of 40,000 elements and 100,000 tombstones (2.8 MB): each
    /// element's tags were taken out of all the tombstones (`subtracting` walks
    /// the set it subtracts), four billion steps to decode it and as many to
    /// merge it, minutes on end. Now linear; the time limit only guards a hang.
    @Test(.timeLimit(.minutes(1))) func manyElementsAndTombstonesDecodeAndMergeInLinearTime() throws {
        let elements = 40_000, tombstones = 100_000
        let members = (0..<elements).map { "{\"element\":\($0),\"tags\":[[3,\($0 + 1)]]}" }.joined(separator: ",")
        let removed = (0..<tombstones).map { "[4,\($0 + 1)]" }.joined(separator: ",")
        let json = Data("{\"elements\":[\(members)],\"removed\":[\(removed)]}".utf8)
        let peer = try JSONDecoder().decode(ORSet<Int>.self, from: json)
        #expect(peer.count == elements && peer.removedTags.count == tombstones)
        var local = ORSet([elements, elements + 1], by: ORSetTests.phone)
        local.remove(elements + 1)
        let merged = local.merging(peer)
        #expect(merged.count == elements + 1 && merged.contains(elements) && !merged.contains(elements + 1))
        #expect(merged.removedTags.count == tombstones + 1)
    }

    @Test func mergeIsCommutativeAssociativeAndIdempotent() throws {
        var random = SeededRandom(seed: 20_261_123)
        let serializer = ValueSerializer<ORSet<Int>>.json
        let resolver = ErasedResolver(ConflictResolver<ORSet<Int>>.observedRemove(), serializer: serializer)
        for _ in 0..<300 {
            var base = ORSet<Int>()
            for _ in 0..<random.nextInt(in: 0...6) { base.insert(random.nextInt(in: 0...9), by: 9) }
            var replicas = [base, base, base]
            for index in replicas.indices {
                for _ in 0..<random.nextInt(in: 0...8) {
                    let element = random.nextInt(in: 0...9)
                    if random.nextBool(probability: 0.5) {
                        replicas[index].insert(element, by: UInt32(index + 1))
                    } else {
                        replicas[index].remove(element)
                    }
                }
                if random.nextBool(probability: 0.3) { replicas[index] = replicas[index].merging(replicas[(index + 1) % 3]) }
            }
            let (a, b, c) = (replicas[0], replicas[1], replicas[2])
            #expect(a.merging(b) == b.merging(a))
            #expect(a.merging(b).merging(c) == a.merging(b.merging(c)))
            #expect(a.merging(a) == a)
            #expect(a.merging(b).merging(b) == a.merging(b))
            // Through the erased resolver, as replication runs it: the same bytes whichever side merges.
            let (bytesA, bytesB) = (try serializer.encode(a), try serializer.encode(b))
            #expect(try resolver.merge(bytesA, bytesB) == resolver.merge(bytesB, bytesA))
            // What a device removed and nobody re-inserted stays removed.
            for element in 0...9 where !a.contains(element) && !b.contains(element) {
                #expect(!a.merging(b).contains(element))
            }
        }
    }

    /// Two stores edit the list while apart (the phone adds one element and
    /// removes another, the watch removes a third and adds one); after a
    /// session over TCP both hold the same set, with every edit in it.
    @Test(arguments: LinkKind.allCases)
    func replicatedStoresConverge(over kind: LinkKind) async throws {
        let pair = try Pair(keys: ORSetKeys.all)
        try await pair.phone.set(ORSet(["a", "b", "c"], by: pair.phone.nodeID), for: ORSetKeys.lists)
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            try await eventually(pair.watch, "the list on the watch") { try pair.watch.storedValue(for: ORSetKeys.lists)?.count == 3 }
            try await phone.waitUntilIdle(timeout: waitLimit)
        }
        // Apart: concurrent edits on both devices.
        var onPhone = try await pair.phone.get(ORSetKeys.lists)
        onPhone.insert("d", by: pair.phone.nodeID)
        onPhone.remove("a")
        try await pair.phone.set(onPhone, for: ORSetKeys.lists)
        var onWatch = try await pair.watch.get(ORSetKeys.lists)
        onWatch.remove("b")
        onWatch.insert("e", by: pair.watch.nodeID)
        onWatch.remove("a")
        try await pair.watch.set(onWatch, for: ORSetKeys.lists)
        try await withConnectedPeers(pair, over: kind) { phone, watch in
            let expected: Set<String> = ["c", "d", "e"]
            try await eventually(pair.phone, "the merged list on the phone") { try pair.phone.storedValue(for: ORSetKeys.lists)?.elements == expected }
            try await eventually(pair.watch, "the merged list on the watch") { try pair.watch.storedValue(for: ORSetKeys.lists)?.elements == expected }
            try await phone.waitUntilIdle(timeout: waitLimit)
            try await watch.waitUntilIdle(timeout: waitLimit)
        }
        let phoneSet = try #require(try pair.phone.storedValue(for: ORSetKeys.lists))
        let watchSet = try #require(try pair.watch.storedValue(for: ORSetKeys.lists))
        #expect(phoneSet == watchSet)
        #expect(try pair.phone.rawValue(forKey: "lists") == pair.watch.rawValue(forKey: "lists"), "byte-identical")
        #expect(phoneSet.elements == ["c", "d", "e"])
    }
}

import Foundation

/// A set that both devices edit, where removals stick: an observed-remove set
/// (OR-set). Store it under a key declared with `resolver: .observedRemove()`.
///
/// Each insertion is tagged with its writer's node id and a counter, unique
/// to it; a removal removes the tags it saw (they are kept as tombstones).
/// Merging two versions unions their tags and drops the removed ones, so:
/// - additions and removals of different elements on two devices all survive;
/// - a removal sticks on both devices, also against a copy that still has the
///   element, unless the other device added it again concurrently (an
///   addition the removal never saw wins).
///
/// ```swift
/// static let lists = Key<ORSet<String>>("lists", default: ORSet(), resolver: .observedRemove())
/// var lists = try await store.get(Keys.lists)
/// lists.insert("Groceries", by: store.nodeID)
/// lists.remove("Old")
/// try await store.set(lists, for: Keys.lists)
/// ```
///
/// Elements need only be `Codable` and `Hashable` (no order); `elements`
/// has no order either. Tombstones grow with every removal (a few bytes each).
public struct ORSet<Element: Codable & Hashable & Sendable>: Sendable, Equatable, Codable, CustomStringConvertible {
    /// One insertion: its writer (a store's `nodeID`) and that writer's counter.
    public struct Tag: Hashable, Sendable, Comparable, Codable {
        public let writer: UInt32
        public let counter: UInt64

        /// The largest counter a set holds: 2^62, beyond any number of
        /// insertions; a value from a peer with a larger one is refused.
        public static var maxCounter: UInt64 { 1 << 62 }

        public init(writer: UInt32, counter: UInt64) {
            self.writer = writer
            self.counter = counter
        }

        public static func < (a: Tag, b: Tag) -> Bool { (a.writer, a.counter) < (b.writer, b.counter) }
    }

    /// Each present element and the tags of its insertions not yet removed.
    public private(set) var tags: [Element: Set<Tag>] = [:]
    /// Tags of removed insertions (tombstones).
    public private(set) var removedTags: Set<Tag> = []

    /// An empty set.
    public init() {}

    /// A set of `elements`, inserted by `writer`.
    public init(_ elements: some Sequence<Element>, by writer: UInt32) {
        for element in elements { insert(element, by: writer) }
    }

    /// The elements present, in no order.
    public var elements: Set<Element> { Set(tags.keys) }
    public var count: Int { tags.count }
    public var isEmpty: Bool { tags.isEmpty }

    public func contains(_ element: Element) -> Bool { tags[element] != nil }

    /// Inserts `element` as a new insertion by `writer` (pass the store's
    /// `nodeID`): it wins over a concurrent removal on the other device, which
    /// could not have seen it.
    public mutating func insert(_ element: Element, by writer: UInt32) {
        tags[element, default: []].insert(Tag(writer: writer, counter: nextCounter(for: writer)))
    }

    /// Removes `element`: every insertion of it seen here becomes a tombstone.
    public mutating func remove(_ element: Element) {
        guard let seen = tags.removeValue(forKey: element) else { return }
        removedTags.formUnion(seen)
    }

    /// Both versions' insertions, without the removed ones: commutative,
    /// associative and idempotent (a join), as a resolver must be.
    public func merging(_ other: ORSet) -> ORSet {
        var merged = ORSet()
        merged.removedTags = removedTags.union(other.removedTags)
        for (element, seen) in tags.merging(other.tags, uniquingKeysWith: { $0.union($1) }) {
            let live = ORSet.live(seen, removed: merged.removedTags)
            if !live.isEmpty { merged.tags[element] = live }
        }
        return merged
    }

    /// The tags of `seen` not in `removed`, in time linear in `seen`:
    /// `subtracting` walks all of `removed` for each element, and a peer's
    /// set of many elements and many tombstones took minutes to decode.
    private static func live(_ seen: Set<Tag>, removed: Set<Tag>) -> Set<Tag> {
        seen.filter { !removed.contains($0) }
    }

    /// The counter of `writer`'s next insertion: after every one of its tags
    /// this set holds, at most `Tag.maxCounter` (which no writer reaches by
    /// inserting; a set built with it reuses it rather than overflow).
    private func nextCounter(for writer: UInt32) -> UInt64 {
        var highest: UInt64 = 0
        for tag in removedTags where tag.writer == writer { highest = max(highest, tag.counter) }
        for seen in tags.values { for tag in seen where tag.writer == writer { highest = max(highest, tag.counter) } }
        return min(highest, Tag.maxCounter - 1) + 1
    }

    public var description: String { "ORSet(\(tags.keys.map { "\($0)" }.sorted().joined(separator: ", ")))" }

    // MARK: Codable, canonical: equal sets encode to equal bytes on every device.

    private enum CodingKeys: String, CodingKey { case elements, removed }

    private struct Member: Codable {
        var element: Element
        var tags: [[UInt64]]
    }

    private static func encode(_ tags: some Sequence<Tag>) -> [[UInt64]] {
        tags.sorted().map { [UInt64($0.writer), $0.counter] }
    }

    private static func decode(_ pairs: [[UInt64]]) throws -> [Tag] {
        try pairs.map { pair in
            guard pair.count == 2, let writer = UInt32(exactly: pair[0]), pair[1] <= Tag.maxCounter else {
                throw SyncError(.typeMismatch, "an ORSet tag must be [writer, counter] with a 32-bit writer and a counter up to 2^62")
            }
            return Tag(writer: writer, counter: pair[1])
        }
    }

    public func encode(to encoder: any Encoder) throws {
        // Elements in the order of their own canonical JSON: hashing order differs between processes.
        let canonical = JSONEncoder()
        canonical.outputFormatting = [.sortedKeys]
        let members = try tags.map { element, seen in
            (key: [UInt8](try canonical.encode([element])), member: Member(element: element, tags: ORSet.encode(seen)))
        }.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.member)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(members, forKey: .elements)
        try container.encode(ORSet.encode(removedTags), forKey: .removed)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        removedTags = Set(try ORSet.decode(try container.decode([[UInt64]].self, forKey: .removed)))
        for member in try container.decode([Member].self, forKey: .elements) {
            let live = ORSet.live(Set(try ORSet.decode(member.tags)), removed: removedTags)
            if !live.isEmpty { tags[member.element, default: []].formUnion(live) }
        }
    }
}

extension ConflictResolver {
    /// Merges two versions of an `ORSet`: insertions on either device
    /// survive, removals stick (see `ORSet`). For lists people edit on both
    /// devices; `.union()` would bring removed elements back.
    public static func observedRemove<Element>() -> ConflictResolver<ORSet<Element>> where Value == ORSet<Element> {
        ConflictResolver<ORSet<Element>>(name: "observed-remove") { $0.merging($1) }
    }
}

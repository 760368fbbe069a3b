import Foundation
@testable import SyncEngine
import Testing

/// A value with the `binaryPropertyList` serializer comes off the wire as
/// bytes; Foundation's decoder follows whatever object references they hold.
@Suite struct PropertyListShapeTests {
    /// A tree of any depth: what an app may store, and what a loop never ends in.
    struct Tree: Codable, Equatable, Sendable {
        var children: [Tree]

        init(children: [Tree] = []) { self.children = children }

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            var children: [Tree] = []
            while !container.isAtEnd { children.append(try container.decode(Tree.self)) }
            self.children = children
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            for child in children { try container.encode(child) }
        }

        static func chain(_ depth: Int) -> Tree { (1..<depth).reduce(Tree()) { inner, _ in Tree(children: [inner]) } }
    }

    struct Record: Codable, Equatable, Sendable {
        var name: String
        var tags: [String]
        var scores: [String: [Int]]
        var when: Date
        var blob: Data
        var note: String?
    }

    /// Objects (each its bytes, references `referenceSize` wide) laid out as
    /// a binary property list with its offset table and trailer.
    static func bplist(_ objects: [[UInt8]], top: Int = 0, referenceSize: Int = 2) -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(bytes.count)
            bytes += object
        }
        let table = bytes.count
        for offset in offsets { bytes += (0..<4).reversed().map { UInt8(truncatingIfNeeded: offset >> ($0 * 8)) } }
        func wide(_ value: Int) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        bytes += [0, 0, 0, 0, 0, 0, 4, UInt8(referenceSize)] + wide(objects.count) + wide(top) + wide(table)
        return bytes
    }

    /// An array object holding `references` (2 bytes each).
    static func array(_ references: [Int]) -> [UInt8] {
        let head: [UInt8] = references.count < 15 ? [0xA0 | UInt8(references.count)]
            : [0xAF, 0x12] + (0..<4).reversed().map { UInt8(truncatingIfNeeded: references.count >> ($0 * 8)) }
        return head + references.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
    }

    static func refused<Value: Codable & Sendable>(_ bytes: [UInt8], as type: Value.Type, _ why: String) {
        #expect(throws: SyncError.self, "\(why)") { _ = try ValueSerializer<Value>.binaryPropertyList.decode(bytes) }
        do {
            _ = try ValueSerializer<Value>.binaryPropertyList.decode(bytes)
        } catch let error as SyncError {
            #expect(error.code == .typeMismatch && error.message.contains(why), "\(error)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test func valuesAnEncoderWritesDecodeAsBefore() throws {
        let record = Record(name: "run", tags: Array(repeating: "same", count: 40) + ["other"],
                            scores: ["a": Array(0..<300), "b": [], "c": [1, 1, 1]], when: Date(timeIntervalSince1970: 1_800_000_000),
                            blob: Data(repeating: 7, count: 70_000), note: nil)
        let serializer = ValueSerializer<Record>.binaryPropertyList
        #expect(try serializer.decode(serializer.encode(record)) == record)
        let wide = Tree(children: Array(repeating: Tree(children: [Tree(), Tree()]), count: 5_000))
        let trees = ValueSerializer<Tree>.binaryPropertyList
        #expect(try trees.decode(trees.encode(wide)) == wide)
        // The deepest accepted: the value 511 levels inside the serializer's own top-level array.
        let deepest = Tree.chain(BinaryPropertyListShape.maxDepth - 1)
        #expect(try trees.decode(trees.encode(deepest)) == deepest)
        #expect(throws: SyncError.self) { _ = try trees.decode(trees.encode(Tree.chain(BinaryPropertyListShape.maxDepth))) }
    }

    /// An array that holds itself: the decoder followed it until the stack overflowed.
    @Test func aLoopIsRefused() {
        Self.refused(Self.bplist([Self.array([1]), Self.array([1])]), as: Tree.self, "more than once")
        Self.refused(Self.bplist([Self.array([0])]), as: Tree.self, "more than once")
    }

    /// One array referenced 2,000 times, of 2,000 elements: 4 million decoded from 12 KB.
    @Test func aSharedContainerIsRefused() throws {
        let inner = Self.array(Array(repeating: 2, count: 2_000))
        let bytes = Self.bplist([Self.array([1]), Self.array(Array(repeating: 3, count: 2_000)), [0x10, 7], inner])
        Self.refused(bytes, as: [[Int]].self, "more than once")
        // A shared scalar, as encoders write repeated strings, is fine.
        let strings = Self.bplist([Self.array([1]), Self.array([2, 2, 2]), [0x51, 0x61]])
        let decoded = try ValueSerializer<[String]>.binaryPropertyList.decode(strings)
        #expect(decoded == ["a", "a", "a"])
    }

    /// Objects laid out once each, named by the offset table as `ids` says
    /// (several entries may name one object's offset).
    static func bplist(_ objects: [[UInt8]], ids: [Int], top: Int) -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(bytes.count)
            bytes += object
        }
        let table = bytes.count
        for id in ids { bytes += (0..<4).reversed().map { UInt8(truncatingIfNeeded: offsets[id] >> ($0 * 8)) } }
        func wide(_ value: Int) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        bytes += [0, 0, 0, 0, 0, 0, 4, 2] + wide(ids.count) + wide(top) + wide(table)
        return bytes
    }

    /// 1,000 entries of the offset table name one array of 1,000 elements: each
    /// entry a container of its own, so none was "held more than once", and 8 KB
    /// decoded to a million elements (seconds to check, seconds more to decode).
    @Test func containersThatShareTheirBytesAreRefused() {
        let count = 1_000
        let objects = [[0x10, 7], Self.array(Array(2..<(count + 2))), Self.array(Array(repeating: 0, count: count))]
        let bytes = Self.bplist(objects, ids: [0, 1] + Array(repeating: 2, count: count), top: 1)
        #expect(bytes.count < 10 * 1024)
        Self.refused(bytes, as: [Int].self, "more than its bytes hold")
    }

    /// One string of 8,000 bytes referenced 20,000 times: 48 KB decoded to 160 MB.
    @Test func aLongStringReferencedManyTimesIsRefused() throws {
        let length = 8_000
        let string: [UInt8] = [0x5F, 0x12] + (0..<4).reversed().map { UInt8(truncatingIfNeeded: length >> ($0 * 8)) }
            + Array(repeating: 0x61, count: length)
        let bytes = Self.bplist([string, Self.array([2]), Self.array(Array(repeating: 0, count: 20_000))], ids: [0, 1, 2], top: 1)
        #expect(bytes.count < 50 * 1024)
        Self.refused(bytes, as: [String].self, "times their size")
        // Shared strings as an app's values hold them decode as before: the same status in every record.
        let statuses = Array(repeating: String(repeating: "pending approval ", count: 6), count: 20_000)
        let serializer = ValueSerializer<[String]>.binaryPropertyList
        #expect(try serializer.decode(serializer.encode(statuses)) == statuses)
    }

    /// 14,000 nested arrays fit in a 100 KB value and overflowed the decoder's stack.
    @Test func nestingPastTheLimitIsRefused() {
        let depth = 14_000
        var objects = [Self.array([1])]
        for level in 1...depth { objects.append(level == depth ? [0xA0] : Self.array([level + 1])) }
        let bytes = Self.bplist(objects)
        #expect(bytes.count < 100 * 1024)
        Self.refused(bytes, as: Tree.self, "deeper than")
    }

    @Test func otherFormatsAndDamagedBytesAreRefusedWithoutTrapping() throws {
        let xml = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><array><array/></array></plist>"#
        Self.refused(Array(xml.utf8), as: Tree.self, "not a binary property list")
        Self.refused(Array("bplist00".utf8) + [UInt8](repeating: 0, count: 32), as: Tree.self, "trailer")
        // Every single-byte change of a real one: refused or decoded, never a trap.
        let serializer = ValueSerializer<[[String: Int]]>.binaryPropertyList
        let bytes = try serializer.encode([["a": 1, "b": 2], ["c": 3]])
        for index in bytes.indices {
            for change: UInt8 in [0x00, 0x01, 0x0F, 0x7F, 0xAF, 0xFF] {
                var damaged = bytes
                damaged[index] = change
                _ = try? serializer.decode(damaged)
            }
        }
        for cut in 0..<bytes.count { _ = try? serializer.decode(Array(bytes.prefix(cut))) }
    }
}

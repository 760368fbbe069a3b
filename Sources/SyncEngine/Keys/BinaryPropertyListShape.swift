/// The object graph of a binary property list that came from a peer, checked
/// before Foundation's `PropertyListDecoder` sees it.
///
/// A binary property list names its objects by reference, so bytes that no
/// encoder writes can make the decoder do unbounded work:
/// - an array that holds itself, which the decoder follows until the stack
///   overflows (for a recursive `Codable` type);
/// - one array referenced many times, each time decoded again (100 KB can
///   stand for billions of elements);
/// - nesting deep enough to overflow the stack (14,000 levels fit in 100 KB).
///
/// Encoders share scalars (equal strings, numbers) but never a container, so
/// a container referenced twice is refused, as is nesting past `maxDepth`
/// (JSONDecoder's own limit). Checked in time linear in the bytes.
enum BinaryPropertyListShape {
    /// The deepest nesting of arrays, sets and dictionaries accepted.
    static let maxDepth = 512

    private static let magic = Array("bplist0".utf8)
    private static let trailerSize = 32

    /// Throws `type-mismatch` unless `bytes` are a binary property list whose
    /// containers form a tree no deeper than `maxDepth`.
    static func check(_ bytes: [UInt8]) throws {
        guard bytes.count >= magic.count + 1 + trailerSize, bytes.starts(with: magic) else {
            throw refusal("is not a binary property list")
        }
        let trailer = bytes.count - trailerSize
        let offsetSize = Int(bytes[trailer + 6]), referenceSize = Int(bytes[trailer + 7])
        guard (1...8).contains(offsetSize), (1...8).contains(referenceSize),
              let objectCount = integer(bytes, at: trailer + 8, size: 8), let top = integer(bytes, at: trailer + 16, size: 8),
              let tableStart = integer(bytes, at: trailer + 24, size: 8),
              objectCount > 0, objectCount <= bytes.count, top < objectCount, tableStart >= magic.count + 1,
              tableStart <= trailer, objectCount <= (trailer - tableStart) / offsetSize else {
            throw refusal("has a trailer that does not fit its bytes")
        }
        func objectStart(_ object: Int) throws -> Int {
            guard let offset = integer(bytes, at: tableStart + object * offsetSize, size: offsetSize),
                  offset >= magic.count + 1, offset < tableStart else { throw refusal("has an object outside its bytes") }
            return offset
        }
        var reached = Set<Int>([top])
        var pending = [(object: top, depth: 1)]
        while let (object, depth) = pending.popLast() {
            let start = try objectStart(object)
            guard let (references, first) = try containerReferences(bytes, at: start, end: tableStart) else { continue }
            for index in 0..<references {
                let at = first + index * referenceSize
                guard at + referenceSize <= tableStart, let child = integer(bytes, at: at, size: referenceSize), child < objectCount else {
                    throw refusal("has a reference outside its objects")
                }
                guard try isContainer(bytes[objectStart(child)]) else { continue }
                guard depth < maxDepth else { throw refusal("nests deeper than \(maxDepth) levels") }
                guard reached.insert(child).inserted else { throw refusal("holds a container more than once (a loop, or one shared)") }
                pending.append((child, depth + 1))
            }
        }
    }

    private static func isContainer(_ marker: UInt8) -> Bool { [0xA, 0xB, 0xC, 0xD].contains(marker >> 4) }

    /// How many references the container at `start` holds and where they
    /// begin; nil for an object that is no container.
    private static func containerReferences(_ bytes: [UInt8], at start: Int, end: Int) throws -> (count: Int, first: Int)? {
        let marker = bytes[start]
        guard isContainer(marker) else { return nil }
        var count = Int(marker & 0x0F), first = start + 1
        if count == 0x0F {
            // The count follows as an integer object: 0x1n, then 2^n bytes.
            guard first < end, bytes[first] >> 4 == 0x1, bytes[first] & 0x0F <= 3 else { throw refusal("has a container with a malformed count") }
            let size = 1 << Int(bytes[first] & 0x0F)
            guard first + 1 + size <= end, let long = integer(bytes, at: first + 1, size: size), long <= end else {
                throw refusal("has a container with a malformed count")
            }
            count = long
            first += 1 + size
        }
        return (marker >> 4 == 0xD ? count * 2 : count, first)
    }

    /// The big-endian unsigned integer of `size` bytes at `at`, nil when it
    /// does not fit the bytes or an `Int`.
    private static func integer(_ bytes: [UInt8], at: Int, size: Int) -> Int? {
        guard at >= 0, size <= bytes.count, at <= bytes.count - size else { return nil }
        var value: UInt64 = 0
        for byte in bytes[at..<(at + size)] { value = value << 8 | UInt64(byte) }
        return value <= UInt64(Int.max) ? Int(value) : nil
    }

    private static func refusal(_ what: String) -> SyncError {
        SyncError(.typeMismatch, "the stored bytes \(what), so they are not decoded (property lists this engine writes never do)")
    }
}

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
/// - objects that share their bytes (two entries of the offset table naming
///   one offset, or containers whose references overlap), each decoded in
///   full (8 KB stood for a million elements, and took seconds to check);
/// - one long string or data referenced many times, decoded once per
///   reference (60 KB decoded to 400 MB).
///
/// Encoders share scalars (equal strings, numbers) but never a container, so
/// a container referenced twice is refused, as is nesting past `maxDepth`
/// (JSONDecoder's own limit); every container's references take bytes of
/// their own, so all of them together fit in the object bytes; and the
/// scalars decoded, one per reference, add up to at most `maxExpansion`
/// times the bytes (plus `expansionAllowance`). Checked in time linear in the bytes.
enum BinaryPropertyListShape {
    /// The deepest nesting of arrays, sets and dictionaries accepted.
    static let maxDepth = 512
    /// How many times its own size the scalars a property list decodes to
    /// may add up to (each reference to a shared one decodes it again).
    static let maxExpansion = 16
    /// Bytes of scalars every property list may decode to, whatever its
    /// size: 64 MiB, the largest value a store takes by default.
    static let expansionAllowance = 64 << 20
    /// What a reference to a scalar other than a string or data counts (a
    /// number, a date): with references of a byte, at most `maxExpansion`.
    private static let scalarCost = 16

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
        // What an encoder writes: each container's references in bytes of their own.
        var referencesLeft = (tableStart - magic.count - 1) / referenceSize
        var decodedLeft = bytes.count * maxExpansion + expansionAllowance
        while let (object, depth) = pending.popLast() {
            let start = try objectStart(object)
            guard let (references, first) = try containerReferences(bytes, at: start, end: tableStart) else { continue }
            guard references <= referencesLeft else {
                throw refusal("has containers whose references add up to more than its bytes hold (objects that share bytes)")
            }
            referencesLeft -= references
            for index in 0..<references {
                let at = first + index * referenceSize
                guard at + referenceSize <= tableStart, let child = integer(bytes, at: at, size: referenceSize), child < objectCount else {
                    throw refusal("has a reference outside its objects")
                }
                let childStart = try objectStart(child)
                guard isContainer(bytes[childStart]) else {
                    decodedLeft -= try scalarSize(bytes, at: childStart, end: tableStart)
                    guard decodedLeft >= 0 else {
                        throw refusal("decode to more than \(maxExpansion) times their size (a long string or data referenced many times)")
                    }
                    continue
                }
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
        let (count, first) = try length(bytes, at: start, end: end, of: "a container")
        return (marker >> 4 == 0xD ? count * 2 : count, first)
    }

    /// About how many bytes the scalar at `start` decodes to: a string's or
    /// data's length (two bytes a UTF-16 unit), `scalarCost` for anything else.
    private static func scalarSize(_ bytes: [UInt8], at start: Int, end: Int) throws -> Int {
        switch bytes[start] >> 4 {
        case 0x4, 0x5: return max(scalarCost, try length(bytes, at: start, end: end, of: "a string or data").count)
        case 0x6: return max(scalarCost, 2 * (try length(bytes, at: start, end: end, of: "a string").count))
        default: return scalarCost
        }
    }

    /// The count in the low bits of the marker at `start` (at most `end`),
    /// and where the object's contents begin.
    private static func length(_ bytes: [UInt8], at start: Int, end: Int, of what: String) throws -> (count: Int, first: Int) {
        var count = Int(bytes[start] & 0x0F), first = start + 1
        if count == 0x0F {
            // The count follows as an integer object: 0x1n, then 2^n bytes.
            guard first < end, bytes[first] >> 4 == 0x1, bytes[first] & 0x0F <= 3 else { throw refusal("has \(what) with a malformed count") }
            let size = 1 << Int(bytes[first] & 0x0F)
            guard first + 1 + size <= end, let long = integer(bytes, at: first + 1, size: size), long <= end else {
                throw refusal("has \(what) with a malformed count")
            }
            count = long
            first += 1 + size
        }
        return (count, first)
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

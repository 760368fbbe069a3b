import Foundation

/// Swift compares strings by canonical equivalence ("José" with a precomposed
/// é equals "Jose" + U+0301), SQLite compares bytes: every key name the
/// store, the registry or the wire takes is kept in Unicode Normalization
/// Form C, so that two spellings of one name are one key on every device.
package enum KeyName {
    /// `name` in NFC; an ASCII name (already NFC) is returned as it is.
    package static func canonical(_ name: String) -> String {
        if isASCII(name) { return name }
        return name.precomposedStringWithCanonicalMapping
    }

    /// A name that came off the wire, in NFC, refused (`malformed-message`)
    /// when NFC makes it longer than `maxBytes`: a peer sends names in NFC
    /// already, and only one that does not can send a name that grows.
    package static func canonicalFromPeer(_ name: String) throws -> String {
        let canonical = canonical(name)
        guard canonical.utf8.count <= maxBytes else {
            throw SyncError(.malformedMessage, "a key name of \(name.utf8.count) bytes from the peer is \(canonical.utf8.count) bytes in NFC, over the \(maxBytes)-byte limit")
        }
        return canonical
    }

    /// The first 64 characters of `name`, quoted and escaped, for a message
    /// about a name that may be of any length.
    package static func excerpt(_ name: String) -> String { String(name.prefix(64)).debugDescription }

    /// Whether `name` holds U+0000, which no key name may: C strings (and
    /// SQLite's, and a log's) end there, so "day:a\0b" would be "day:a".
    package static func containsNUL(_ name: String) -> Bool { name.utf8.contains(0) }

    /// The longest full name (a family member's too) of a key that
    /// replicates, in UTF-8 bytes: what a peer's decoder accepts. A longer
    /// one could never be sent, and a batch holding it would end every
    /// session. A key that never leaves the device has no such bound.
    package static var maxBytes: Int { SyncMessage.maxNameLength }

    private static func isASCII(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            var bits: UInt8 = 0
            for byte in bytes { bits |= byte }
            return bits < 0x80
        }
    }
}

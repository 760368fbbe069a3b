import Foundation
import SyncEngine

extension NodeConsole {
    /// The longest line `syncsim node` reads: a `put` of the largest value
    /// the store takes (`StoreOptions.maxValueSize`) written all in `\uXXXX`
    /// escapes, with room for the command and key. A longer line is skipped.
    static let lineLimit = 6 * StoreOptions().maxValueSize + 64 * 1024

    /// A line of stdin: its text, its length when it is not UTF-8, or how
    /// long it was when it passed `limit` (its bytes are not kept).
    enum InputLine: Equatable {
        case text(String)
        case notUTF8(byteCount: Int)
        case tooLong(byteCount: Int)

        /// The line's bytes, without its newline, as a command line.
        init(_ bytes: some Collection<UInt8>) {
            if let text = String(validating: bytes, as: UTF8.self) { self = .text(text) } else { self = .notUTF8(byteCount: bytes.count) }
        }
    }

    /// Lines of `descriptor` (stdin), read on a thread of their own (not
    /// `readLine`, which replaces bytes that are not UTF-8 with U+FFFD, nor
    /// `getline`, whose buffer grows with the line without end). A last line
    /// without its newline is a line; a line past `limit` bytes is read to its
    /// newline without being kept and yields `.tooLong`.
    static func inputLines(from descriptor: Int32, limit: Int) -> AsyncStream<InputLine> {
        AsyncStream { continuation in
            let thread = Thread {
                var pending: [UInt8] = []
                var skipped: Int?  // the length so far of a line past the limit
                var chunk = [UInt8](repeating: 0, count: 64 * 1024)
                func take(_ bytes: ArraySlice<UInt8>, ending: Bool) {
                    if let count = skipped {
                        skipped = count + bytes.count
                    } else if pending.count + bytes.count > limit {
                        skipped = pending.count + bytes.count
                        pending = []
                    } else {
                        pending += bytes
                    }
                    guard ending else { return }
                    if let count = skipped {
                        continuation.yield(.tooLong(byteCount: count))
                    } else {
                        continuation.yield(InputLine(pending))
                    }
                    pending = []
                    skipped = nil
                }
                while true {
                    let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                    if count < 0, errno == EINTR { continue }
                    guard count > 0 else { break }
                    var start = 0
                    while let newline = chunk[start..<count].firstIndex(of: UInt8(ascii: "\n")) {
                        take(chunk[start..<newline], ending: true)
                        start = newline + 1
                    }
                    take(chunk[start..<count], ending: false)
                }
                // End of input inside a line: that line still counts.
                if !pending.isEmpty || skipped != nil { take([], ending: true) }
                continuation.finish()
            }
            thread.start()
        }
    }

    /// Whether the registry declares `key` encrypted: its value is never
    /// repeated in a reply (what goes to a log or a terminal).
    func isEncrypted(_ key: String) -> Bool {
        store.registry.descriptor(forEntry: key)?.security == .encrypted
    }

    /// The most of a value (or of a parser's reason, which may quote it) a
    /// reply repeats: 40 Unicode scalars (so one character of endless
    /// combining marks stays bounded), `…` when cut.
    static func excerpt(_ text: some StringProtocol, limit: Int = 40) -> String {
        let scalars = text.unicodeScalars
        guard scalars.count > limit else { return String(text) }
        var shown = String.UnicodeScalarView()
        shown.append(contentsOf: scalars.prefix(limit))
        return String(shown) + "…"
    }

    /// A parser's reason, bounded as `excerpt` at 200 scalars.
    static func bounded(_ reason: String) -> String { excerpt(reason, limit: 200) }

    /// The reply to a `put` of an encrypted key whose value is not JSON: the
    /// key and where the parser stopped (`character N`, from Foundation's
    /// reason), nothing of the value or of a reason that could quote it.
    static func sealedValueNotJSON(key: String, reason: String?) -> [String: Any] {
        var position = ""
        if let reason, let range = reason.range(of: "around character ") {
            let digits = reason[range.upperBound...].prefix { $0.isASCII && $0.isNumber }
            if let offset = Int(digits) { position = " (it stops being JSON at byte \(offset))" }
        }
        return invalid("put takes KEY and a JSON value; the value given for '\(key)' is not JSON\(position); "
                       + "'\(key)' is declared encrypted, so its value is not repeated here")
    }
}

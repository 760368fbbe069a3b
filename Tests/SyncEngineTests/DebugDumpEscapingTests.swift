import Foundation
@testable import SyncEngine
import Testing

/// `debugDump` prints key names and value previews a peer may have chosen (a
/// family member's id, a value): control and format characters are escaped,
/// so a dump written to a terminal or a log cannot clear it, recolour it or
/// forge lines.
@Suite(.timeLimit(.minutes(2))) struct DebugDumpEscapingTests {
    static let notes = KeyFamily<String>("notes", default: "", policy: .never, serializer: .string)

    @Test func keysAndPreviewsAreEscaped() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: KeyRegistry([Self.notes]))
        try await store.set("plain", for: Self.notes["ok"])
        try await store.set("a\u{9B}2Jb\u{202E}c", for: Self.notes["x\u{1B}[2J:y\ninjected"])
        let dump = try store.debugDump(previewValues: true)
        for invisible in ["\u{1B}", "\u{9B}", "\u{202E}"] {
            #expect(!dump.contains(invisible), "the dump holds \(invisible.unicodeScalars.first!.value) as it is")
        }
        #expect(!dump.contains("\ninjected"), "a key's newline started a line of its own")
        #expect(dump.contains("notes:ok"))
        #expect(dump.contains("= plain"))
    }
}

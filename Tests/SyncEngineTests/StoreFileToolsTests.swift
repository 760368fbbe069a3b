import Foundation
@testable import SyncEngine
import Testing

/// What tools use of a store file: the read-only inspection snapshot and the
/// empty-store template.
@Suite struct StoreFileToolsTests {
    static func registry() throws -> KeyRegistry {
        try KeyRegistry(descriptors: [
            KeyDescriptor(name: "plain"), KeyDescriptor(name: "hidden", security: .encrypted),
            KeyDescriptor(name: "manual", policy: .manual), KeyDescriptor(name: "local", policy: .never),
        ])
    }

    @Test func inspectionReadsEntriesWithoutWriting() throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let store = try SyncStore(path: path, role: .watch, registry: try Self.registry(),
                                  options: StoreOptions(clock: ManualClock(), encryption: .keyFile(path: folder.file("k"))))
        try store.setEncoded(Array("\"visible\"".utf8), forKey: "plain")
        try store.setEncoded(Array("\"secret\"".utf8), forKey: "hidden")
        try store.setEncoded(Array("1".utf8), forKey: "manual")
        try store.setEncoded(Array("2".utf8), forKey: "local")
        try store.removeValue(forKey: "plain")
        let before = try Data(contentsOf: URL(fileURLWithPath: path))

        let elided = try SyncStore.inspect(path: path)
        #expect(elided.nodeID == store.nodeID)
        #expect(elided.role == "watch")
        #expect(elided.entries.map(\.key) == ["hidden", "local", "manual", "plain"])
        #expect(elided.entries.allSatisfy { $0.value == nil })
        let byKey = Dictionary(uniqueKeysWithValues: elided.entries.map { ($0.key, $0) })
        #expect(byKey["plain"]?.isDeleted == true)
        #expect(byKey["hidden"]?.isEncrypted == true)
        #expect(byKey["local"]?.isPending == false)
        #expect(byKey["local"]?.lane == 0)
        #expect(byKey["manual"]?.lane == 2)
        #expect(elided.pending.map(\.key) == ["hidden", "manual", "plain"])
        #expect(elided.pending.map(\.changeSeq) == elided.pending.map(\.changeSeq).sorted())
        #expect(byKey["manual"]?.version == (try store.entryInfo(forKey: "manual"))?.version)
        #expect(elided.peers.isEmpty)
        #expect(elided.conflicts.isEmpty)

        let shown = try SyncStore.inspect(path: path, includeValues: true)
        let values = Dictionary(uniqueKeysWithValues: shown.entries.map { ($0.key, $0.value) })
        #expect(values["manual"] == Array("1".utf8))
        #expect(values["hidden"] == .some(nil))
        #expect(values["plain"] == .some(nil))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }

    @Test func inspectionRefusesWhatIsNotAStore() throws {
        let folder = TempFolder()
        #expect(throws: SyncError.self) { try SyncStore.inspect(path: folder.file("absent.sqlite")) }
        try "not a database at all".write(toFile: folder.file("notes.sqlite"), atomically: true, encoding: .utf8)
        #expect(throws: SyncError.self) { try SyncStore.inspect(path: folder.file("notes.sqlite")) }
    }

    @Test func templateCopiesOpenAsNewStores() throws {
        let folder = TempFolder()
        let template = try StoreFileTemplate(temporaryDirectory: folder.path)
        // application_id "SyEn" at bytes 68..<72 of the header: a store of ours.
        #expect(Array(template.bytes[68..<72]) == Array("SyEn".utf8))
        #expect(template.install(at: folder.file("a.sqlite")))
        #expect(!template.install(at: folder.file("a.sqlite")))
        #expect(template.install(at: folder.file("b.sqlite")))
        var options = StoreOptions(clock: ManualClock())
        options.nodeID = 0x77
        let a = try SyncStore(path: folder.file("a.sqlite"), role: .watch, registry: try KeyRegistry(descriptors: [KeyDescriptor(name: "k")]),
                              options: options)
        let b = try SyncStore(path: folder.file("b.sqlite"), role: .phone, registry: try KeyRegistry(descriptors: [KeyDescriptor(name: "k")]),
                              options: StoreOptions(clock: ManualClock()))
        #expect(a.nodeID == 0x77)
        #expect(b.nodeID != 0x77)
        #expect(try a.allEntryInfo().isEmpty)
        try a.setEncoded(Array("5".utf8), forKey: "k")
        #expect(try a.rawValue(forKey: "k") == Array("5".utf8))
        #expect(try b.rawValue(forKey: "k") == nil)
        #expect(try SyncStore.inspect(path: folder.file("a.sqlite")).role == "watch")
        #expect(try SyncStore.inspect(path: folder.file("b.sqlite")).role == "phone")
    }
}

import Foundation
@testable import SyncEngine
import Testing

/// A store holding values sealed at rest, opened without a master key by an
/// app update that no longer declares any key `encrypted` (and so dropped
/// `StoreOptions.encryption`): the sealed value reads as a clear error, and
/// every other change still reaches the peer.
@Suite(.timeLimit(.minutes(2))) struct SealedValueWithoutKeyTests {
    static let units = Key<String>("units", default: "metric", availability: .all, policy: .automaticSmall)
    static let sealedPin = Key<String>("pin", default: "", availability: .all, policy: .automaticSmall, security: .encrypted)
    static let plainPin = Key<String>("pin", default: "", availability: .all, policy: .automaticSmall)

    @Test func aSealedValueWithoutItsKeyDoesNotStopTheOtherChanges() async throws {
        let folder = TempFolder()
        let marker = "PIN-\(UUID().uuidString)"
        let phonePath = folder.file("phone.sqlite")
        let before = try SyncStore(path: phonePath, role: .phone, registry: KeyRegistry([Self.units, Self.sealedPin]),
                                   options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try await before.set(marker, for: Self.sealedPin)
        try await before.set("imperial", for: Self.units)
        before.close()

        let registry = try KeyRegistry([Self.units, Self.plainPin])
        let phone = try SyncStore(path: phonePath, role: .phone, registry: registry)
        await #expect {
            _ = try await phone.get(Self.plainPin)
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .encryptionKeyMissing && !error.description.contains(marker)
        }
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: registry)
        let link = Link(phone, watch)
        link.connect()
        link.settle()
        #expect(try await watch.get(Self.units) == "imperial", "one sealed value the phone cannot open stopped every change")
        #expect(!link.allBytes.contains(subsequence: Array(marker.utf8)))
        // The sealed value is still there, whole, for the build that has the key.
        phone.close()
        let withKey = try SyncStore(path: phonePath, role: .phone, registry: KeyRegistry([Self.units, Self.sealedPin]),
                                    options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        #expect(try await withKey.get(Self.sealedPin) == marker)
    }
}

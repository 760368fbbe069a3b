import Foundation
@testable import SyncEngine
import Testing

/// A value sealed at rest that a store opened without its master key could
/// not send is held, not passed over: once the store is opened with the key
/// again, it goes to the peer without the app writing it again, and nothing
/// else is sent again.
@Suite(.timeLimit(.minutes(2))) struct HeldSealedValueTests {
    static let units = Key<String>("units", default: "metric", availability: .all, policy: .automaticSmall)
    static let sealedPin = Key<String>("pin", default: "", availability: .all, policy: .automaticSmall, security: .encrypted)
    static let plainPin = Key<String>("pin", default: "", availability: .all, policy: .automaticSmall)

    @Test func aSealedValuePassedOverWithoutItsKeyIsSentOnceTheKeyIsBack() async throws {
        let folder = TempFolder()
        let marker = "PIN-\(UUID().uuidString)"
        let phonePath = folder.file("phone.sqlite"), watchPath = folder.file("watch.sqlite")
        let sealed = try KeyRegistry([Self.units, Self.sealedPin]), plain = try KeyRegistry([Self.units, Self.plainPin])
        let phoneKey = StoreOptions(encryption: .keyFile(path: folder.file("phone.key")))
        let written = try SyncStore(path: phonePath, role: .phone, registry: sealed, options: phoneKey)
        try await written.set(marker, for: Self.sealedPin)
        written.close()

        // An update that dropped the key: the sealed value cannot be read; the other changes go.
        let withoutKey = try SyncStore(path: phonePath, role: .phone, registry: plain)
        try await withoutKey.set("imperial", for: Self.units)
        let watch = try SyncStore(path: watchPath, role: .watch, registry: plain)
        let first = Link(withoutKey, watch)
        first.connect()
        first.settle()
        #expect(try await watch.get(Self.units) == "imperial")
        #expect(try watch.entryInfo(forKey: Self.plainPin.name) == nil)
        #expect(!first.allBytes.contains(subsequence: Array(marker.utf8)))
        #expect(try withoutKey.entryInfo(forKey: Self.plainPin.name)?.isPending == true, "the watch never got the pin")
        withoutKey.close()
        watch.close()

        // The key is back (both devices declare the pin encrypted again): the pin goes, and only it.
        let withKey = try SyncStore(path: phonePath, role: .phone, registry: sealed, options: phoneKey)
        defer { withKey.close() }
        let watchAgain = try SyncStore(path: watchPath, role: .watch, registry: sealed,
                                       options: StoreOptions(encryption: .keyFile(path: folder.file("watch.key"))))
        defer { watchAgain.close() }
        let second = Link(withKey, watchAgain)
        second.connect()
        second.settle()
        #expect(try await watchAgain.get(Self.sealedPin) == marker, "the pin waited for the key, and was not sent once it was back")
        #expect(second.entryKeys == [Self.sealedPin.name], "\(second.entryKeys)")
        #expect(try withKey.peerHas(key: Self.sealedPin.name, atLeast: .zero))
    }
}

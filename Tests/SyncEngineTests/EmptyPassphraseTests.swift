import Foundation
@testable import SyncEngine
import Testing

/// An empty passphrase (an app setting not loaded yet) would seal values with a key anyone derives.
@Suite(.timeLimit(.minutes(2))) struct EmptyPassphraseTests {
    @Test func anEmptyPassphraseIsRefusedForANewStore() throws {
        let folder = TempFolder()
        #expect {
            _ = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                              options: StoreOptions(encryption: .passphrase("", iterations: 1)))
        } throws: { ($0 as? SyncError)?.code == .invalidConfiguration }
    }
}

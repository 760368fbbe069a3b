import Foundation
import Testing
@testable import SyncTransport

@Suite struct PairingSecretDurabilityTests {
    /// Before: `write` synced the file but not its folder, so after a power
    /// cut the new name (the created file, or the rename over the old one)
    /// could be gone: zero folder syncs. Now one per write, either way.
    @Test func writeSyncsTheFolder() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        for overwrite in [false, true] {
            let counter = PairingSecret.Counter()
            try PairingSecret.$folderSyncs.withValue(counter) {
                try PairingSecret.generate().write(to: path, overwrite: overwrite)
            }
            #expect(counter.value == 1, "overwrite: \(overwrite)")
        }
    }
}

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

    /// Before: a process that died between creating `PATH.tmp-N` and renaming
    /// it left that copy of a secret (mode 0600) for good. Now `write`
    /// removes such leftovers of its own path, and nothing else.
    @Test func writeRemovesLeftoverTemporariesOnly() throws {
        let folder = try temporaryDirectory()
        for overwrite in [false, true] {
            let path = folder + "/pairing-\(overwrite).secret"
            let leftovers = [path + ".tmp-0", path + ".tmp-12345", path + ".tmp-4294967295"]
            let kept = [
                path + ".tmp-", path + ".tmp-12x", path + ".tmp-012", path + ".tmp-4294967296", path + ".tmp-1.bak",
                path + ".tmp--1", path + ".tmp-+1", path + "x.tmp-1", folder + "/other.secret.tmp-1", path + ".bak",
            ]
            for file in leftovers + kept {
                #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8), attributes: [.posixPermissions: 0o600]))
            }
            let directory = path + ".tmp-77"  // not a file: left alone
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            let secret = PairingSecret.generate()
            try secret.write(to: path, overwrite: overwrite)
            #expect(try PairingSecret.load(from: path) == secret)
            for file in leftovers { #expect(!FileManager.default.fileExists(atPath: file), "\(file)") }
            for file in kept + [directory] { #expect(FileManager.default.fileExists(atPath: file), "\(file)") }
        }
    }
}

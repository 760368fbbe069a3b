import Foundation
@testable import SyncSim
import SyncTransport
import Testing

/// What `syncsim pair` and `syncsim node` say about a secret file speaks of
/// the command line (`--force`, `syncsim pair --out`), not of the library's
/// parameters (`overwrite: true`, `PairingSecret.generate().write(to:)`).
@Suite struct SecretFileMessageTests {
    @Test func pairOverAnExistingFileNamesForceOnly() throws {
        let folder = TempFolder()
        let file = folder.file("pair.secret")
        try PairCommand.parse(["--out", file]).run()
        let before = try PairingSecret.load(from: file)
        do {
            try PairCommand.parse(["--out", file]).run()
            Issue.record("an existing secret was replaced without --force")
        } catch let failure as CommandFailure {
            #expect(failure.exitCode == Simulation.Exit.runtimeFailure)
            #expect(failure.message.contains("--force"), "\(failure.message)")
            #expect(!failure.message.contains("overwrite"), "\(failure.message)")
        }
        #expect(try PairingSecret.load(from: file) == before)
    }

    @Test func nodeWithAMissingSecretFileIsToldHowToMakeOne() throws {
        let folder = TempFolder()
        let missing = folder.file("watch.secret")
        #expect {
            _ = try NodeCommand.loadSecrets([missing])
        } throws: { error in
            let text = "\(error)"
            return (error as? TransportError)?.code == .badSecretFile && text.contains("syncsim pair --out \(missing)")
                && !text.contains("PairingSecret.generate")
        }
    }
}

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

    /// A symbolic link at `--out` (`ln -s nowhere dang.secret`) was refused with
    /// the library's "a pairing secret file already exists …; pass overwrite:
    /// true", though no file was there. Now the message names the link, where
    /// it points and `--force`, which replaces the link and leaves its target alone.
    @Test func pairOverASymbolicLinkNamesTheLinkAndForce() throws {
        let folder = TempFolder()
        let target = folder.file("target.secret")
        try PairCommand.parse(["--out", target]).run()
        let before = try PairingSecret.load(from: target)
        let dangling = folder.file("dang.secret"), link = folder.file("link.secret")
        try #require(symlink("nowhere", dangling) == 0 && symlink(target, link) == 0)
        for (path, pointsTo, dangles) in [(dangling, "nowhere", true), (link, target, false)] {
            do {
                try PairCommand.parse(["--out", path]).run()
                Issue.record("\(path) was replaced without --force")
            } catch let failure as CommandFailure {
                #expect(failure.exitCode == Simulation.Exit.runtimeFailure)
                #expect(failure.message.contains(path) && failure.message.contains("a symbolic link to \(pointsTo)"), "\(failure.message)")
                #expect(failure.message.contains("does not exist") == dangles, "\(failure.message)")
                #expect(failure.message.contains("--force") && !failure.message.contains("overwrite"), "\(failure.message)")
                #expect(!failure.message.contains("a pairing secret file already exists"), "\(failure.message)")
            }
        }
        try PairCommand.parse(["--out", link, "--force"]).run()
        try PairCommand.parse(["--out", dangling, "--force"]).run()
        var info = stat()
        for path in [link, dangling] {
            #expect(lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG, "\(path) is now the secret itself")
            _ = try PairingSecret.load(from: path)
        }
        #expect(try PairingSecret.load(from: target) == before, "the link's target is left alone")
        #expect(!FileManager.default.fileExists(atPath: folder.file("nowhere")))
    }

    /// Before: `syncsim node --secret-file LINK`, a symbolic link whose target
    /// is gone, said "no pairing secret file at LINK; make one with `syncsim pair
    /// --out LINK`", which then refused, the link being there. Now the node
    /// names the link and where it points, as the library does.
    @Test func nodeWithADanglingSecretLinkIsToldItIsALink() throws {
        let folder = TempFolder()
        let link = folder.file("watch.secret"), nowhere = folder.file("moved.secret")
        try #require(symlink(nowhere, link) == 0)
        #expect {
            _ = try NodeCommand.loadSecrets([link])
        } throws: { error in
            let text = "\(error)"
            return (error as? TransportError)?.code == .badSecretFile
                && text.contains("\(link) is a symbolic link to \(nowhere), which does not exist") && !text.contains("syncsim pair")
        }
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

import Foundation
import Testing
@testable import SyncTransport

@Suite struct PairingSecretTests {
    @Test func writesWithMode0600AndLoadsBack() throws {
        let folder = try temporaryDirectory()
        let path = folder + "/pairing.secret"
        let secret = PairingSecret.generate()
        try secret.write(to: path)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix("syncengine-pairing-v1\n"))
        #expect(text.split(separator: "\n").count == 2)
        let loaded = try PairingSecret.load(from: path)
        #expect(loaded == secret)
        #expect(loaded.epoch == secret.epoch)
        #expect(PairingSecret.generate() != secret)
    }

    @Test func refusesToOverwriteUnlessAsked() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        try PairingSecret.generate().write(to: path)
        let error = expectCode(.badSecretFile) { try PairingSecret.generate().write(to: path) }
        #expect(error?.message.contains("overwrite") == true)
        let replacement = PairingSecret.generate()
        try replacement.write(to: path, overwrite: true)
        #expect(try PairingSecret.load(from: path) == replacement)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)
    }

    @Test func loadErrorsAreClear() throws {
        let folder = try temporaryDirectory()
        let missing = expectCode(.badSecretFile) { _ = try PairingSecret.load(from: folder + "/nope") }
        #expect(missing?.message.contains("no pairing secret file") == true)

        func write(_ text: String, mode: Int = 0o600) throws -> String {
            let path = folder + "/\(UUID().uuidString)"
            _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode])
            return path
        }
        let good = Data((0..<32).map { UInt8($0) }).base64EncodedString()
        let wide = expectCode(.badSecretFile) { _ = try PairingSecret.load(from: try write("syncengine-pairing-v1\n\(good)\n", mode: 0o644)) }
        #expect(wide?.message.contains("chmod 600") == true)
        let header = expectCode(.badSecretFile) { _ = try PairingSecret.load(from: try write("hello\n\(good)\n")) }
        #expect(header?.message.contains("does not start with") == true)
        expectCode(.badSecretFile) { _ = try PairingSecret.load(from: try write("syncengine-pairing-v1\n!!!notbase64\n")) }
        expectCode(.badSecretFile) { _ = try PairingSecret.load(from: try write("syncengine-pairing-v1\n")) }
        let short = expectCode(.badSecretFile) {
            _ = try PairingSecret.load(from: try write("syncengine-pairing-v1\n\(Data([1, 2, 3]).base64EncodedString())\n"))
        }
        #expect(short?.message.contains("has 3 bytes, expected 32") == true)
        expectCode(.badSecretFile) { _ = try PairingSecret.load(from: folder) }
        #expect(try PairingSecret.load(from: try write("syncengine-pairing-v1\n\(good)\n")).bytes == Array(0..<32))
        expectCode(.badSecretFile) { _ = try PairingSecret(bytes: [1, 2]) }
    }

    /// Before: a secret file with Windows line ends (`\r\n`: copied through
    /// a Windows machine, or written by a tool there) was refused as one that
    /// "does not start with `syncengine-pairing-v1`", though it did: Swift
    /// reads `\r\n` as one character, so the text split on `\n` was one
    /// line, and the trimming of each line's `\r` never came to pass.
    @Test func loadsAFileWithWindowsLineEnds() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        let secret = PairingSecret.generate()
        let text = "\(PairingSecret.fileHeader)\r\n\(Data(secret.bytes).base64EncodedString())\r\n"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]))
        #expect(try PairingSecret.load(from: path) == secret)
    }

    /// Before: writing a secret at a symbolic link that leads nowhere said "a
    /// pairing secret file already exists at …; pass overwrite: true to
    /// replace it", though no file was anywhere (`open` with `O_EXCL` refuses
    /// any link). Now the message says the path is a symbolic link, where it
    /// points, that the target does not exist, and that a secret is never
    /// written through a link: `overwrite: true` replaces the link itself.
    @Test func writingAtASymbolicLinkSaysSoAndNeverFollowsIt() throws {
        let folder = try temporaryDirectory()
        let nowhere = folder + "/nowhere", target = folder + "/target.secret", directory = folder + "/folder"
        let dangling = folder + "/dangling.secret", linked = folder + "/linked.secret", toFolder = folder + "/folder.secret"
        let original = PairingSecret.generate()
        try original.write(to: target)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        try #require(symlink(nowhere, dangling) == 0 && symlink(target, linked) == 0 && symlink(directory, toFolder) == 0)

        let danglingError = expectCode(.badSecretFile) { try PairingSecret.generate().write(to: dangling) }
        let danglingMessage = danglingError?.message ?? ""
        #expect(danglingMessage.contains("\(dangling) is a symbolic link to \(nowhere), which does not exist"), "\(danglingMessage)")
        #expect(danglingMessage.contains("overwrite: true") && !danglingMessage.contains("already exists"), "\(danglingMessage)")

        let linkedError = expectCode(.badSecretFile) { try PairingSecret.generate().write(to: linked) }
        let linkedMessage = linkedError?.message ?? ""
        #expect(linkedMessage.contains("\(linked) is a symbolic link to \(target)"), "\(linkedMessage)")
        #expect(!linkedMessage.contains("does not exist") && linkedMessage.contains("overwrite: true"), "\(linkedMessage)")

        for overwrite in [false, true] {
            let folderError = expectCode(.badSecretFile) { try PairingSecret.generate().write(to: toFolder, overwrite: overwrite) }
            let folderMessage = folderError?.message ?? ""
            #expect(folderMessage.contains("\(toFolder) is a symbolic link to \(directory) (a directory)"), "\(folderMessage)")
        }
        #expect(!FileManager.default.fileExists(atPath: nowhere), "nothing was written through the link")
        #expect(try PairingSecret.load(from: target) == original)

        // `overwrite: true` replaces the link itself, never what it points to.
        for path in [dangling, linked] {
            let replacement = PairingSecret.generate()
            try replacement.write(to: path, overwrite: true)
            var info = stat()
            #expect(lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG, "\(path) is now the secret file itself")
            #expect(try PairingSecret.load(from: path) == replacement)
        }
        #expect(!FileManager.default.fileExists(atPath: nowhere))
        #expect(try PairingSecret.load(from: target) == original)
    }

    /// Before: loading through a symbolic link whose target does not exist
    /// said "no pairing secret file at PATH; pair the devices first", though
    /// something is at PATH: a link, to be pointed at the secret file, and
    /// pairing again would not help. Now it names the link and where it points.
    @Test func loadingThroughADanglingLinkSaysSo() throws {
        let folder = try temporaryDirectory()
        let nowhere = folder + "/moved.secret", link = folder + "/pair.secret"
        try #require(symlink(nowhere, link) == 0)
        let error = expectCode(.badSecretFile) { _ = try PairingSecret.load(from: link) }
        let message = error?.message ?? ""
        #expect(message.contains("\(link) is a symbolic link to \(nowhere), which does not exist"), "\(message)")
        #expect(!message.contains("no pairing secret file"), "\(message)")
        // A path that is missing, link or no link, is still told to pair.
        let missing = expectCode(.badSecretFile) { _ = try PairingSecret.load(from: folder + "/none/pair.secret") }
        #expect(missing?.message.contains("no pairing secret file") == true)
    }

    @Test func neverPrintsTheSecret() throws {
        let secret = try PairingSecret(bytes: Array(repeating: 0xAB, count: 32))
        let texts = [secret.description, secret.debugDescription, "\(secret)", String(reflecting: secret)]
        var dumped = ""
        dump(secret, to: &dumped)
        for text in texts + [dumped] {
            #expect(!text.lowercased().contains("abab"))
            #expect(!text.contains(Data(secret.bytes).base64EncodedString()))
            #expect(!text.contains("171"))
        }
        #expect(secret.description == "PairingSecret(epoch: \(secret.epoch))")
        #expect(secret.epoch.count == 16)
        #expect(secret.epoch == (try PairingSecret(bytes: Array(repeating: 0xAB, count: 32))).epoch)
        #expect(secret.epoch != PairingSecret.generate().epoch)
    }
}

import Foundation
import Testing
@testable import SyncTransport

/// `write(to:overwrite:)` removed every `PATH.tmp-N` beside the secret file,
/// a write under way in another process too (whose rename then failed), and
/// `load(from:)` removed none, so a dead write's copy of a secret stayed
/// until the next write, which a pairing may never see. A write now holds a
/// `flock` on its temporary file until after its rename; `write` and `load`
/// remove only temporary files whose lock is free (their writer is gone).
@Suite struct PairingSecretLeftoverTests {
    /// A temporary file being written: created and locked as a writer does,
    /// through its own open file description (so its lock stands against
    /// every other `open`, of this process too). Close `descriptor` when done.
    static func fileUnderWay(_ path: String) throws -> Int32 {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(descriptor >= 0)
        try #require(flock(descriptor, LOCK_EX | LOCK_NB) == 0)
        return descriptor
    }

    static func createLeftover(_ path: String) {
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8), attributes: [.posixPermissions: 0o600]))
    }

    @Test func loadRemovesADeadWritesTemporaryFile() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        let secret = PairingSecret.generate()
        try secret.write(to: path)
        let leftovers = [path + ".tmp-7", path + ".tmp-4294967295"]
        for leftover in leftovers { Self.createLeftover(leftover) }
        let other = path + ".tmp-12x"  // not a name a write gives its temporary file
        Self.createLeftover(other)
        #expect(try PairingSecret.load(from: path) == secret)
        for leftover in leftovers { #expect(!FileManager.default.fileExists(atPath: leftover), "\(leftover) stayed") }
        #expect(FileManager.default.fileExists(atPath: other))
    }

    @Test func aWriteUnderWayKeepsItsTemporaryFile() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        try PairingSecret.generate().write(to: path)
        let underWay = path + ".tmp-99"
        var descriptor = try Self.fileUnderWay(underWay)
        defer { if descriptor >= 0 { close(descriptor) } }
        let dead = path + ".tmp-98"
        Self.createLeftover(dead)
        _ = try PairingSecret.load(from: path)
        #expect(FileManager.default.fileExists(atPath: underWay), "load removed a write under way")
        let secret = PairingSecret.generate()
        try secret.write(to: path, overwrite: true)
        #expect(FileManager.default.fileExists(atPath: underWay), "write removed a write under way")
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(try PairingSecret.load(from: path) == secret)
        // Once its writer is gone (the lock dropped with the descriptor), it is a leftover like any other.
        close(descriptor)
        descriptor = -1
        _ = try PairingSecret.load(from: path)
        #expect(!FileManager.default.fileExists(atPath: underWay))
    }

    /// A FIFO under a temporary file's name does not hold `load`
    /// (it is opened non-blocking) and stays, as anything but a regular file does.
    @Test func aFIFOUnderATemporaryNameStays() throws {
        let path = try temporaryDirectory() + "/pairing.secret"
        let secret = PairingSecret.generate()
        try secret.write(to: path)
        let fifo = path + ".tmp-5"
        try #require(mkfifo(fifo, 0o600) == 0)
        #expect(try PairingSecret.load(from: path) == secret)
        #expect(FileManager.default.fileExists(atPath: fifo))
    }
}

import ArgumentParser
import Foundation
import SyncTransport

/// `syncsim pair --out FILE`: makes a pairing secret file (mode 0600).
public struct PairCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pair", abstract: "Make a pairing secret file (mode 0600) for two nodes; prints its epoch, never the secret.")

    @Option(help: "Where to write the secret.")
    var out: String

    @Flag(help: "Replace an existing file.")
    var force = false

    public init() {}

    public func run() throws {
        let secret = PairingSecret.generate()
        do {
            try secret.write(to: out, overwrite: force)
        } catch {
            // The library's own message names its `overwrite:` parameter, not the option, and calls a link a file.
            if !force, let (existing, isLink) = Self.replaceable(at: out) {
                let replaced = isLink ? "the link itself, not what it points to" : "it"
                throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure,
                                     "cannot write the pairing secret to \(out): \(existing) is already there; use --force to replace \(replaced)")
            }
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot write the pairing secret to \(out): \(error)")
        }
        print("wrote a pairing secret to \(out) (mode 0600); epoch \(secret.epoch)")
    }

    /// What is at `path` that `--force` replaces, described: a regular file, or
    /// a symbolic link (itself, not its target) that leads nowhere or to a
    /// regular file. Nil for nothing, or for what `--force` never replaces (a
    /// directory, FIFO or device, or a link to one).
    static func replaceable(at path: String) -> (description: String, isLink: Bool)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            return ("a file", false)
        case S_IFLNK:
            let link = "a symbolic link to \((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "an unreadable target")"
            var followed = stat()
            guard stat(path, &followed) == 0 else {
                let code = errno
                return (code == ENOENT ? "\(link), which does not exist," : "\(link), which cannot be followed (\(String(cString: strerror(code)))),", true)
            }
            return followed.st_mode & S_IFMT == S_IFREG ? (link, true) : nil
        default:
            return nil
        }
    }
}

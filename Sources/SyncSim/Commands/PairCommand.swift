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
            // The hint only for an existing regular file: --force never replaces a directory, FIFO or device.
            let existing = (try? FileManager.default.attributesOfItem(atPath: out)[.type] as? FileAttributeType) == .typeRegular
            guard force || !existing else {
                // The library's own message names its `overwrite:` parameter, not the option.
                throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure,
                                     "cannot write the pairing secret to \(out): a file is already there; use --force to replace it")
            }
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot write the pairing secret to \(out): \(error)")
        }
        print("wrote a pairing secret to \(out) (mode 0600); epoch \(secret.epoch)")
    }
}

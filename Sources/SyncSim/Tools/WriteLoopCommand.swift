import ArgumentParser
import Foundation
import SyncEngine

/// Hidden helper for crash tests: writes batches forever and prints the last
/// index of each batch once its call has returned (so a killer knows what
/// was acknowledged to the "app").
public struct WriteLoopCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "write-loop", abstract: "Crash-test helper: write batches until killed.", shouldDisplay: false)

    @Option(help: "The store file.") var db: String
    @Option(help: "Writes per batch (1...10000).") var batch: Int = 50

    /// The batch sizes taken: at least one write (0 or less wrote nothing, or
    /// trapped), and few enough that a batch ends in moments.
    public static let batchRange = 1...10_000

    public init() {}

    public func validate() throws {
        guard Self.batchRange.contains(batch) else {
            throw ValidationError("--batch must be in \(Self.batchRange.lowerBound)...\(Self.batchRange.upperBound), not \(batch)")
        }
    }

    public static let family = KeyFamily<Int>("crash", default: -1, availability: .all, policy: .automaticSmall)

    public func run() throws {
        let store = try SyncStore(path: db, role: .phone, registry: try KeyRegistry([WriteLoopCommand.family]))
        var next = 0
        while true {
            let start = next
            try store.batchNow { b in
                for i in start..<(start + batch) { try b.set(i, for: WriteLoopCommand.family["k\(i)"]) }
            }
            next += batch
            try FileHandle.standardOutput.write(contentsOf: Data("\(next - 1)\n".utf8))
        }
    }
}

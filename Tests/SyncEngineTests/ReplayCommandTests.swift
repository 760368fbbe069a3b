import Foundation
@_spi(Testing) import SyncEngine
@_spi(Testing) @testable import SyncSim
import Testing

/// The replay command a failed run prints is one a shell runs as it stands:
/// every injected fault is in it.
@Suite struct ReplayCommandTests {
    /// The words `/bin/sh` makes of `command`.
    static func shellWords(_ command: String) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "set -- \(command); printf '%s\\0' \"$@\""]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\0", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    @Test func everyInjectedFaultIsInTheReplayCommand() throws {
        let names = ["skip-tombstones", "last-arrival-wins", "ignore-key-mismatch", "remove-rebaselined-at-once"]
        let replay = SimReport.replayCommand(scenario: "s.json", seed: 3, transport: nil, faults: try Simulation.testingFaults(named: names))
        let words = try Self.shellWords(replay)
        let injected = words.indices.filter { words[$0] == "--inject-fault" }.map { words[$0 + 1] }
        #expect(Set(injected) == Set(names), "\(replay)")
        #expect(try Simulation.testingFaults(named: injected) == Simulation.testingFaults(named: names))
    }
}

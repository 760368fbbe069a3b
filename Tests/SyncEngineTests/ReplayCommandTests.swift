import Foundation
@_spi(Testing) import SyncEngine
@_spi(Testing) @testable import SyncSim
import Testing

/// The replay command a failed run prints is one a shell runs as it stands:
/// every injected fault is in it, and a path with spaces or quotes stays one argument.
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

    @Test func aPathWithSpacesAndQuotesStaysOneArgument() throws {
        let path = "/tmp/my runs/it's $HOME; `x` \"q\".json"
        let replay = SimReport.replayCommand(scenario: path, seed: 9, transport: "tcp", faults: TestingFaults())
        #expect(try Self.shellWords(replay) == ["syncsim", "run", path, "--seed", "9", "--transport", "tcp"])
        #expect(SimReport.replayCommand(scenario: "Fixtures/scenarios/a-b_c.json", seed: 1, transport: nil, faults: TestingFaults())
                == "syncsim run Fixtures/scenarios/a-b_c.json --seed 1")
    }
}

import Foundation
import Synchronization
import SyncTransport
import Testing

/// Lines a child printed so far.
final class SeenLines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// Builds are part of `swift test`; this runs the example phone and watch programs against each other.
@Suite struct ExampleAppsTests {
    static func binary(_ name: String) -> String {
        URL(fileURLWithPath: syncsimBinary()).deletingLastPathComponent().appendingPathComponent(name).path
    }

    @Test func phoneAndWatchExamplesSync() async throws {
        let folder = TempFolder()
        let secret = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secret)
        let phone = Process()
        phone.executableURL = URL(fileURLWithPath: ExampleAppsTests.binary("PhoneApp"))
        phone.arguments = [folder.path, secret]
        let phoneOut = Pipe()
        phone.standardOutput = phoneOut
        try phone.run()
        defer { if phone.isRunning { kill(phone.processIdentifier, SIGKILL) } }
        let phoneLines = lines(of: phoneOut)
        let listening = try await first(of: phoneLines, "the phone app to listen")
        let port = try #require(Int(listening.replacingOccurrences(of: "listening ", with: "")))

        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: ExampleAppsTests.binary("WatchApp"))
        watch.arguments = [folder.path, secret, String(port)]
        let watchOut = Pipe()
        watch.standardOutput = watchOut
        try watch.run()
        defer { if watch.isRunning { kill(watch.processIdentifier, SIGKILL) } }
        // Generous: on a loaded two-core CI machine a dial can time out and back off before it connects.
        // What the watch printed so far is kept, for the failure message.
        let watchSeen = SeenLines()
        let watchStream = lines(of: watchOut)
        let watchLines: [String]
        do {
            watchLines = try await withDeadline("the watch app's output to end", within: .seconds(150)) {
                for await line in watchStream { watchSeen.append(line) }
                return watchSeen.all
            }
        } catch {
            Issue.record("the watch app printed: \(watchSeen.all)")
            throw error
        }
        let phoneSeen = SeenLines()
        let phoneRest: [String]
        do {
            phoneRest = try await withDeadline("the phone app's output to end") {
                for await line in phoneLines { phoneSeen.append(line) }
                return phoneSeen.all
            }
        } catch {
            Issue.record("the phone app printed: \(phoneSeen.all) (running: \(phone.isRunning)); the watch app: \(watchLines)")
            throw error
        }
        #expect(try await exitStatus(of: watch, "the watch app to exit") == 0)
        #expect(try await exitStatus(of: phone, "the phone app to exit") == 0)
        #expect(watchLines.contains("watch sees steps 8000, units imperial, profile Ada, token ''"))
        #expect(watchLines.contains("watch cannot write units: write-not-allowed"))
        #expect(watchLines.contains("watch sees workouts [\"run\", \"swim\"]"))
        #expect(phoneRest.contains("phone sees workouts [\"run\", \"swim\"]"))
    }
}

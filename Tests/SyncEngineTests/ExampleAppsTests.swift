import Foundation
import SyncTransport
import Testing

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
        var phoneLines = lines(of: phoneOut).makeAsyncIterator()
        let listening = try #require(await phoneLines.next())
        let port = try #require(Int(listening.replacingOccurrences(of: "listening ", with: "")))

        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: ExampleAppsTests.binary("WatchApp"))
        watch.arguments = [folder.path, secret, String(port)]
        let watchOut = Pipe()
        watch.standardOutput = watchOut
        try watch.run()
        var watchLines: [String] = []
        for await line in lines(of: watchOut) { watchLines.append(line) }
        var phoneRest: [String] = []
        while let line = await phoneLines.next() { phoneRest.append(line) }
        watch.waitUntilExit()
        phone.waitUntilExit()
        #expect(watch.terminationStatus == 0)
        #expect(phone.terminationStatus == 0)
        #expect(watchLines.contains("watch sees steps 8000, units imperial, profile Ada, token ''"))
        #expect(watchLines.contains("watch cannot write units: write-not-allowed"))
        #expect(watchLines.contains("watch sees workouts [\"run\", \"swim\"]"))
        #expect(phoneRest.contains("phone sees workouts [\"run\", \"swim\"]"))
    }
}

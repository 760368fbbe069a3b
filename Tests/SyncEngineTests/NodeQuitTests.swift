import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// `quit` (or SIGTERM, or SIGINT: Ctrl-C) ends a `syncsim node`'s sessions
/// before it closes its store, so what a session writes as it ends reaches
/// the file. A signal killed the process at once before.
@Suite struct NodeQuitTests {
    /// A batch records how far the peer's stream was received at most once a
    /// second; the end of the session records the rest. The node closed its
    /// store first, so that record failed (a warning at every quit) and the
    /// file kept the position of the first of two quick writes.
    @Test(arguments: ["quit", "SIGTERM", "SIGINT"])
    func quittingRecordsHowFarThePeersChangesWereReceived(how: String) async throws {
        let setup = try await ListeningPhoneNode()
        let phone = setup.phone
        defer { setup.phone.stop() }
        let watch = try setup.watch()
        defer { watch.stop() }

        for steps in [1, 2] {
            phone.send("put health:steps \(steps)")
            #expect(try await phone.reply("put health:steps \(steps)")["ok"] as? Bool == true)
            try await watch.next("health:steps \(steps) on the watch") { $0["event"] as? String == "change" }
        }
        phone.send("status")
        let nodeHex = try #require(try await phone.reply("status")["node"] as? String)
        let phoneNode = try #require(UInt32(nodeHex, radix: 16))
        switch how {
        case "SIGTERM": kill(watch.process.processIdentifier, SIGTERM)
        case "SIGINT": kill(watch.process.processIdentifier, SIGINT)
        default: watch.send("quit")
        }
        #expect(try await exitStatus(of: watch.process, "the watch node to stop (\(how))") == 0)
        phone.send("quit")
        #expect(try await exitStatus(of: phone.process, "the phone node to quit") == 0)

        // A node that quit closed its store: each `.sqlite` alone holds everything (no `-wal` left to copy).
        let copies = TempFolder()
        for name in ["phone.sqlite", "watch.sqlite"] {
            #expect(!FileManager.default.fileExists(atPath: setup.folder.file(name + "-wal")), "\(name)-wal left after the node ended (\(how))")
            try FileManager.default.copyItem(atPath: setup.folder.file(name), toPath: copies.file(name))
        }
        let registry = try KeyRegistry.load(jsonFile: setup.keys)
        let phoneStore = try SyncStore(path: copies.file("phone.sqlite"), role: .phone, registry: registry)
        defer { phoneStore.close() }
        let watchStore = try SyncStore(path: copies.file("watch.sqlite"), role: .watch, registry: registry)
        defer { watchStore.close() }
        let position = try SQLiteReplicationPort(phoneStore).streamPosition()
        #expect(position >= 2)
        #expect(try watchStore.receivedThrough(from: phoneNode).through == position)
    }
}

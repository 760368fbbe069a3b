import Foundation
import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// `syncsim node`'s `put` of a value that is not JSON repeated its first 40
/// characters in the reply, for a key declared encrypted too (a PIN typed
/// with a typo went to the terminal or log). Such a key's reply names the
/// key and where the value stops being JSON, nothing of the value; another
/// key's reply still shows the start of the value, bounded in Unicode
/// scalars (one character of endless combining marks counted as one).
@Suite struct NodePutEchoTests {
    static func console(_ folder: TempFolder) throws -> (NodeConsole, SyncStore) {
        let registry = try KeyRegistry(descriptors: [
            KeyDescriptor(name: "vault:pin", security: .encrypted), KeyDescriptor(name: "note"),
        ])
        var options = StoreOptions()
        options.encryption = .keyFile(path: folder.file("n.key"))
        let store = try SyncStore(path: folder.file("n.sqlite"), role: .phone, registry: registry, options: options)
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        return (NodeConsole(store: store, peer: peer, output: JSONLineWriter(handle: FileHandle.nullDevice)), store)
    }

    @Test func anEncryptedKeysValueIsNeverRepeated() async throws {
        let folder = TempFolder()
        let (console, store) = try Self.console(folder)
        defer { store.close() }
        let secret = "hunter2-8731"
        // Not JSON at all, a trailing comma, a member given twice (its name is the value's too), a number out of range.
        for value in ["\(secret)", "[\"\(secret)\",]", "{\"\(secret)\":1,\"\(secret)\":2}", "1e999\(secret)"] {
            let reply = await console.execute("put vault:pin \(value)")
            let error = try #require(reply["error"] as? String, "\(reply)")
            #expect(reply["code"] as? String == "invalid-command", "\(reply)")
            #expect(!error.contains("hunter2") && !error.contains("8731"), "\(error)")
            #expect(error.contains("'vault:pin'") && error.contains("not JSON"), "\(error)")
        }
        let positioned = try #require(await console.execute("put vault:pin 12x34")["error"] as? String)
        #expect(positioned.contains("at byte 2"), "\(positioned)")
        #expect(await console.execute("put vault:pin \"\(secret)\"")["ok"] as? Bool == true)
    }

    @Test func anotherKeysValueIsShownBounded() async throws {
        let folder = TempFolder()
        let (console, store) = try Self.console(folder)
        defer { store.close() }
        let plain = try #require(await console.execute("put note {bad")["error"] as? String)
        #expect(plain.contains("'{bad' is not JSON"), "\(plain)")
        // One character: "x" and 10,000 combining marks.
        let long = "x" + String(repeating: "\u{0301}", count: 10_000)
        let reply = try #require(await console.execute("put note \(long)")["error"] as? String)
        #expect(reply.unicodeScalars.count < 600, "\(reply.unicodeScalars.count) scalars")
        // Its first 40 scalars: the "x" and 39 of the marks.
        #expect(reply.unicodeScalars.filter { $0 == "\u{0301}" }.count == 39, "\(reply.prefix(200))")
    }
}

import Foundation
import SyncTransport
import Testing

/// Where the `syncsim node` quit and input tests start: a folder with
/// `keys` (by default `NodeMultiPairingTests.keys`) and a new pairing secret,
/// and a phone node listening on a free port of 127.0.0.1, given
/// `extraArguments` too. Stop `phone` when done (it keeps the folder alive
/// until then).
struct ListeningPhoneNode {
    let folder = TempFolder()
    let keys: String
    let secretFile: String
    let phone: NodeProcess
    let port: Int

    init(keys declared: String = NodeMultiPairingTests.keys, extraArguments: [String] = []) async throws {
        keys = folder.file("keys.json")
        try Data(declared.utf8).write(to: URL(fileURLWithPath: keys))
        secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)
        let phone = try NodeProcess(["--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--listen", "127.0.0.1:0"] + extraArguments)
        do {
            let listening = try await phone.next("the phone node to listen") { $0["event"] as? String == "listening" }
            port = try #require(listening["port"] as? Int)
        } catch {
            phone.stop()
            throw error
        }
        self.phone = phone
    }

    /// A watch node of the same pairing (its store `watch.sqlite` in the folder) that dials the phone.
    func watch() throws -> NodeProcess {
        try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                         "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
    }
}

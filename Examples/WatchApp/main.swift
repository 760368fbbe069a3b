// The watch: connects, reads what the phone sent, adds a workout.
// Usage: WatchApp FOLDER SECRET_FILE PORT
import Foundation
import SharedKeys
import SyncEngine
import SyncTransport

let folder = CommandLine.arguments[1], secret = try PairingSecret.load(from: CommandLine.arguments[2])
let port = Int(CommandLine.arguments[3])!
let store = try AppKeys.openStore(role: .watch, folder: folder)
let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
let changes = store.changes()
let client = Task { await peer.maintainConnection(host: "127.0.0.1", port: port, configuration: TCPConfiguration(secret: secret)) }

for await _ in changes where try await store.get(AppKeys.profile) == "Ada" { break }
print("watch sees steps \(try await store.get(AppKeys.steps)), units \(try await store.get(AppKeys.units)), profile \(try await store.get(AppKeys.profile)), token '\(try await store.get(AppKeys.token))'")
do {
    try await store.set("metric", for: AppKeys.units)
} catch let error as SyncError {
    print("watch cannot write units: \(error.code)")
}
try await store.set(try await store.get(AppKeys.workouts) + ["swim"], for: AppKeys.workouts)  // read-modify-write
try await peer.waitUntilIdle(timeout: .seconds(30))
print("watch sees workouts \(try await store.get(AppKeys.workouts))")
client.cancel()
await client.value  // the session ends (and records what it received) before the program does

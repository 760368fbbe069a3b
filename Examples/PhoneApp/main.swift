// The phone: listens, writes, and waits until the watch's workout arrives.
// Usage: PhoneApp FOLDER SECRET_FILE
import Foundation
import SharedKeys
import SyncEngine
import SyncTransport

let folder = CommandLine.arguments[1], secret = try PairingSecret.load(from: CommandLine.arguments[2])
let store = try AppKeys.openStore(role: .phone, folder: folder)
let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
FileHandle.standardOutput.write(Data("listening \(listener.port)\n".utf8))  // unbuffered: the watch needs the port now
let events = store.events()  // subscribed before the watch can come and go
let workoutChanges = store.changes(for: AppKeys.workouts)  // and before it can write
let server = Task { await peer.serve(listener) }

try await store.set(8_000, for: AppKeys.steps)               // automatic
try await store.set("imperial", for: AppKeys.units)          // phone → watch only
try await store.set("Ada", for: AppKeys.profile)             // manual: waits for sync()
try await store.set("s3cret", for: AppKeys.token)            // never leaves the phone
try await store.set(["run"], for: AppKeys.workouts)
try peer.sync()

// The watch's workout may already be here (a loaded machine can run the watch's whole sync first).
if try await !store.get(AppKeys.workouts).contains("swim") {
    for await change in workoutChanges where change.origin == .remote {
        if try await store.get(AppKeys.workouts).contains("swim") { break }
    }
}
print("phone sees workouts \(try await store.get(AppKeys.workouts))")
// The watch leaves once it saw the workout acknowledged: serve until then.
for await event in events {
    if case .disconnected = event, !peer.isConnected { break }
}
await listener.close()
server.cancel()
await server.value

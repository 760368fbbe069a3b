import Foundation
@testable import SyncEngine
import Testing

/// Two stores on one file (an app and its extension, or two `SyncStore`s of
/// one process): a node id one of them takes (`renewNodeID()`, or a phone's
/// `node-id-conflict`) is the file's, and the other writes under it too.
@Suite(.timeLimit(.minutes(2))) struct SharedFileNodeRenewalTests {
    @Test func aStoreSharingTheFileWritesUnderTheNodeIDAnotherTook() async throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        let registry = try KeyRegistry([TestKeys.steps])
        let app = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        let fileExtension = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        #expect(fileExtension.nodeID == app.nodeID)
        let renewed = try app.renewNodeID()

        try await fileExtension.set(7, for: TestKeys.steps)
        let version = try #require(try fileExtension.entryInfo(forKey: TestKeys.steps.name)).version
        #expect(version.node == renewed, "the other store kept writing under the node id given up (another device's, after a node-id-conflict)")
        #expect(fileExtension.nodeID == renewed)
        // A look for the other's commits learns it too, without a write.
        let third = try SyncStore(path: path, role: .watch, registry: registry, options: options)
        let again = try app.renewNodeID()
        try third.checkForExternalChanges()
        #expect(third.nodeID == again)
    }
}

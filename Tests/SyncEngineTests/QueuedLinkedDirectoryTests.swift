import Foundation
@testable import SyncEngine
import SyncTransport
import Testing

/// One mailbox directory reached by two paths: through a symbolic link and
/// not (`/var/…` and `/private/var/…` on Apple platforms, an app group's
/// folder through a link of the app's).
@Suite struct QueuedLinkedDirectoryTests {
    /// Before: the phone took the two paths for two mailboxes, each with a
    /// watch of its own. The watch, met through both, was refused as
    /// `node-id-conflict` ("also the node id of the watch of another mailbox
    /// of this phone … copied from that watch's"), and it took a new node id
    /// after every other round, though "Mailboxes of one directory, role and
    /// pairing are one".
    @Test func aDirectoryReachedThroughALinkIsTheSameMailbox() throws {
        let pair = try Pair()
        let directory = pair.folder.file("mailbox")
        let link = pair.folder.file("link")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: directory)
        let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: config)
        let watch = SyncPeer(store: pair.watch, configuration: config)
        let watchBox = try Mailbox(directory: directory, role: .watch, secret: pair.pairing)
        let watchNode = pair.watch.nodeID
        var refused: [String] = []
        for round in 1...6 {
            try pair.phone.setNow(round, for: TestKeys.steps)
            let phoneBox = try Mailbox(directory: round.isMultiple(of: 2) ? directory : link, role: .phone, secret: pair.pairing)
            refused += try phone.deliverQueued(through: phoneBox).refused.map(\.description)
            refused += try watch.deliverQueued(through: watchBox).refused.map(\.description)
            #expect(try pair.watch.value(for: TestKeys.steps) == round)
        }
        #expect(refused.isEmpty, "\(refused)")
        #expect(pair.watch.nodeID == watchNode)
    }
}

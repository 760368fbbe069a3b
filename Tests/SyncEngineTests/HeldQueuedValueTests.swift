import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// Queued delivery (a mailbox) holds a value whose file cannot be read as a
/// live session does: the round posts every other change, the value is
/// reported once and stays pending, and a later round posts it once its file
/// reads again (the watch's acknowledgement moved the cursor past its change;
/// the note in the store kept it).
@Suite(.timeLimit(.minutes(3))) struct HeldQueuedValueTests {
    /// `metBefore`: the two exchanged a round before the file was blocked (the
    /// phone posts for the watch's node); otherwise the first round posts for a
    /// peer not known yet.
    @Test(arguments: [true, false])
    func otherKeysGoThroughTheMailboxWhileAValueFileIsUnreadableAndTheValueGoesOnceItReads(metBefore: Bool) async throws {
        let (pair, phoneFiles) = try Pair.withPhoneValueFiles()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        /// A round on each side, then the phone's again (it reads the watch's acknowledgement).
        func rounds() throws {
            #expect(try phone.deliverQueued(through: phoneBox).failure == nil)
            #expect(try watch.deliverQueued(through: watchBox).failure == nil)
            #expect(try phone.deliverQueued(through: phoneBox).failure == nil)
        }
        if metBefore {
            try await phoneFiles.set(1, for: TestKeys.steps)
            try rounds()
            #expect(try pair.watch.storedValue(for: TestKeys.steps) == 1)
        }
        let everything = pair.phone.events()
        try await phoneFiles.set(["a"], for: TestKeys.tags)
        let version = try #require(try pair.phone.entryInfo(forKey: TestKeys.tags.name)).version
        let path = phoneFiles.directory + "/values/" + ValueFiles.fileName(key: TestKeys.tags.name, version: version)
        let aside = try pair.blockValueFile(at: path)
        pair.phone.cache.invalidateAll()
        // Written while the tags' file cannot be read: it goes all the same, in the same round.
        try await phoneFiles.set(5, for: TestKeys.steps)
        try rounds()
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        #expect(try pair.watch.entryInfo(forKey: TestKeys.tags.name) == nil)
        #expect(try pair.phone.heldChanges().map(\.key) == [TestKeys.tags.name])
        #expect(try pair.phone.entryInfo(forKey: TestKeys.tags.name)?.isPending == true, "the watch never got the tags")
        #expect(try !pair.phone.peerHas(key: TestKeys.tags.name, atLeast: version))

        // More rounds while it still cannot be read, with another key written meanwhile: still held, not reported again.
        try await phoneFiles.set("imperial", for: TestKeys.units)
        try rounds()
        try rounds()
        #expect(try pair.watch.storedValue(for: TestKeys.units) == "imperial")
        #expect(try pair.watch.entryInfo(forKey: TestKeys.tags.name) == nil)
        #expect(try pair.phone.heldChanges().map(\.key) == [TestKeys.tags.name])
        #expect(try pair.phone.entryInfo(forKey: TestKeys.tags.name)?.isPending == true)

        // Missing for a moment, as it is put back: a round leaves it held (sending would pass it over for good).
        try FileManager.default.removeItem(atPath: path)
        #expect(try phone.deliverQueued(through: phoneBox).failure == nil)
        #expect(try pair.phone.heldChanges().map(\.key) == [TestKeys.tags.name])
        try FileManager.default.moveItem(atPath: aside, toPath: path)
        try rounds()
        #expect(try pair.watch.storedValue(for: TestKeys.tags) == ["a"], "the tags went through the mailbox once their file read again")
        #expect(try pair.phone.heldChanges().isEmpty)
        #expect(try pair.phone.entryInfo(forKey: TestKeys.tags.name)?.isPending == false)
        #expect(try pair.phone.peerHas(key: TestKeys.tags.name, atLeast: version))
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)

        phoneFiles.close()
        let seen = try await all(of: everything, "the phone's events until it closed")
        let reports = seen.compactMap { event -> SyncError? in
            if case .error(let error) = event, error.message.contains(path) { error } else { nil }
        }
        #expect(reports.count == 1, "the unreadable value is reported once: \(reports)")
        #expect(reports.first?.code == .valueFileUnreadable)
        #expect(reports.first?.message.contains(TestKeys.tags.name) == true)
        let otherErrors = seen.filter { if case .error(let error) = $0 { !error.message.contains(path) } else { false } }
        #expect(otherErrors.isEmpty, "\(otherErrors)")
    }
}

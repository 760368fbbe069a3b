import Foundation
@testable import SyncEngine
import Testing

/// `forgetPeers(ofPairing:)` while a session with one of the pairing's watches
/// runs throws `.writeNotAllowed` and forgets none of them: it used to forget
/// those before the live one (ascending node ids), which then re-baselined
/// although the call failed.
@Suite(.timeLimit(.minutes(1))) struct ForgetPairingTests {
    @Test func aLiveWatchOfThePairingLeavesEveryWatchOfItKnown() throws {
        let pair = try Pair()
        try pair.phone.recordPeer(node: 0x10, role: .watch, epoch: "old pairing")
        try pair.phone.recordPeer(node: 0x20, role: .watch, epoch: "old pairing")
        pair.phone.noteSession(with: 0x20, live: true)
        do {
            try pair.phone.forgetPeers(ofPairing: "old pairing")
            Issue.record("forgetPeers(ofPairing:) did not throw while a watch of the pairing is live")
        } catch let error as SyncError {
            #expect(error.code == .writeNotAllowed)
        }
        #expect(try pair.phone.knownPeers(ofPairing: "old pairing") == [0x10, 0x20])
        #expect(try pair.phone.forgottenPeers().isEmpty)

        pair.phone.noteSession(with: 0x20, live: false)
        #expect(try pair.phone.forgetPeers(ofPairing: "old pairing") == [0x10, 0x20])
        #expect(try pair.phone.knownPeers().isEmpty)
        #expect(Set(try pair.phone.forgottenPeers()) == [0x10, 0x20])
    }
}

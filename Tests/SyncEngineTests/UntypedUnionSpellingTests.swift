import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A keys-file key with resolver `union` and no `"type"` merges JSON values,
/// ordering elements by their JSON text. Lists of the same elements spelled
/// differently (`1.0` and `1`, `-0.0` and `0`, object keys in another order,
/// "é" precomposed and decomposed) still leave both devices with the same
/// bytes, whichever side writes last and whichever reads first. (The merge
/// is not idempotent for `-0.0`: the final list may depend on the delivery
/// order, but both devices hold the same one.)
@Suite(.timeLimit(.minutes(5))) struct UntypedUnionSpellingTests {
    static let spellings: [(phone: String, watch: String)] = [
        ("[-0.0, 1]", "[0, 2]"),
        ("[\"\u{e9}\", 1]", "[\"e\u{301}\", 2]"),
        ("[{\"b\":1,\"a\":2}, 1.0]", "[{\"a\":2,\"b\":1}, 1]"),
        ("[0.1, 1e2, -0.0, 0]", "[100, 0.10, 1E2, 3]"),
    ]

    static func pair() throws -> Pair {
        let registry = try KeyRegistry(descriptors: [KeyDescriptor(name: "list", resolver: "union")])
        var pair = try Pair()
        pair.phone = try SyncStore(path: pair.folder.file("untyped-phone.sqlite"), role: .phone, registry: registry,
                                   options: StoreOptions(clock: pair.phoneClock))
        pair.watch = try SyncStore(path: pair.folder.file("untyped-watch.sqlite"), role: .watch, registry: registry,
                                   options: StoreOptions(clock: pair.watchClock))
        return pair
    }

    static func writeConcurrently(_ pair: Pair, _ lists: (phone: String, watch: String), watchWritesLast: Bool) throws {
        let (first, second) = watchWritesLast ? (pair.phone, pair.watch) : (pair.watch, pair.phone)
        try first.setEncoded(Array((watchWritesLast ? lists.phone : lists.watch).utf8), forKey: "list")
        (watchWritesLast ? pair.watchClock : pair.phoneClock).advance(by: 5)
        try second.setEncoded(Array((watchWritesLast ? lists.watch : lists.phone).utf8), forKey: "list")
    }

    static func expectSameBytes(_ pair: Pair, _ what: String) throws {
        let phone = try pair.phone.encodedValue(forKey: "list")
        let watch = try pair.watch.encodedValue(forKey: "list")
        #expect(phone != nil && phone == watch, "\(what): \(String(decoding: phone ?? [], as: UTF8.self)) / \(String(decoding: watch ?? [], as: UTF8.self))")
        // The device that met both writes merged them (through a mailbox, the other may only receive the merge).
        #expect(try (pair.phone.conflictLog() + pair.watch.conflictLog()).contains { $0.rule == .resolver }, "\(what)")
    }

    @Test(arguments: spellings.indices)
    func overALink(index: Int) throws {
        for watchWritesLast in [true, false] {
            let pair = try Self.pair()
            try Self.writeConcurrently(pair, Self.spellings[index], watchWritesLast: watchWritesLast)
            let link = Link(pair.phone, pair.watch)
            link.connect()
            link.settle()
            try Self.expectSameBytes(pair, "watch writes last: \(watchWritesLast)")
        }
    }

    /// Queued delivery, where only one side may merge (the other receives the merge).
    @Test(arguments: spellings.indices)
    func throughAMailbox(index: Int) throws {
        for watchReadsFirst in [true, false] {
            let pair = try Self.pair()
            try Self.writeConcurrently(pair, Self.spellings[index], watchWritesLast: true)
            let folder = TempFolder()
            let config = ReplicationConfiguration(pairingEpoch: pair.pairing.epoch)
            let phone = (SyncPeer(store: pair.phone, configuration: config), try Mailbox(directory: folder.path, role: .phone, secret: pair.pairing))
            let watch = (SyncPeer(store: pair.watch, configuration: config), try Mailbox(directory: folder.path, role: .watch, secret: pair.pairing))
            let order = watchReadsFirst ? [watch, phone] : [phone, watch]
            var quiet = false
            for _ in 0..<20 where !quiet {
                let rounds = try order.map { try $0.0.deliverQueued(through: $0.1) }
                quiet = rounds.allSatisfy { $0.messagesRead == 0 && $0.messagesPosted == 0 }
            }
            #expect(quiet, "queued delivery came to rest")
            try Self.expectSameBytes(pair, "watch reads first: \(watchReadsFirst)")
        }
    }
}

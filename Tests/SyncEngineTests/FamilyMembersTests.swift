import Foundation
@testable import SyncEngine
import Testing

@Suite(.timeLimit(.minutes(2))) struct FamilyMembersTests {
    /// `members(of:)` lists the ids of the family's own members: not entries
    /// of a nested family, whose names start with the family's. (An exact key
    /// named as a member, `day:total`, is refused by the registry:
    /// FamilyKeyCollisionTests.)
    @Test func membersAreOnlyTheFamilysOwn() async throws {
        let folder = TempFolder()
        let day = KeyFamily<Int>("day", default: 0)
        let hours = KeyFamily<Int>("hours", in: Namespace("day"), default: 0)  // day:hours:<id>
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: KeyRegistry([day, hours]))
        try await store.set(1, for: day["2026-12-05"])
        try await store.set(2, for: hours["2026-12-05"])
        let members = try store.members(of: day)
        #expect(members == ["2026-12-05"])
        for id in members { _ = try await store.get(day[id]) }
        #expect(try store.members(of: hours) == ["2026-12-05"])
    }
}

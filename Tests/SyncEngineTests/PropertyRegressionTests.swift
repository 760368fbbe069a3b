@testable import SyncEngine
import Testing

/// Shrunk counterexample found by `randomHistoriesMatchTheModel` in a CI run: after a
/// restart the change sequence restarted below a row's acknowledged sequence, so a
/// new write looked acknowledged and never left the phone.
@Test func restartThenDeferredLargeValueConverges() throws {
    let steps: [Step] = [.set(.phone, key: 6, value: 10), .set(.watch, key: 6, value: 12), .deliverAll, .restart(.phone), .set(.phone, key: 6, value: 8)]
    let harness = try PropertyHarness()
    for step in steps { try harness.apply(step) }
    let failure = try harness.finish()
    #expect(failure == nil, "\(failure ?? "")")
}

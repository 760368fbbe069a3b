import Foundation
import Synchronization
@testable import SyncEngine
import SyncSim
import SyncTransport
import Testing

/// A session at rest is not woken several times a second: its ticks grow
/// apart while it is idle, and anything it handles brings them back.
@Suite(.timeLimit(.minutes(2))) struct QuietTickTests {
    @Test func ticksThatFindNothingToDoDoubleUpToTheQuietInterval() {
        var ticks = TickSchedule(base: .milliseconds(200), quiet: .seconds(5))
        #expect(ticks.interval == .milliseconds(200))
        let waits = (0..<7).map { _ in ticks.next(after: .tick(sent: false), quiet: true) }
        #expect(waits == [.milliseconds(400), .milliseconds(800), .milliseconds(1_600), .milliseconds(3_200), .seconds(5), .seconds(5), .seconds(5)])
        // A question about the session's state changes nothing.
        #expect(ticks.next(after: .diagnostics, quiet: true) == .seconds(5))
        // A frame, a local change or a request: back to the base interval.
        #expect(ticks.next(after: .other, quiet: true) == .milliseconds(200))
        #expect(ticks.next(after: .tick(sent: false), quiet: true) == .milliseconds(400))
    }

    @Test func aSessionWithSomethingToDoTicksAtTheBaseInterval() {
        var ticks = TickSchedule(base: .milliseconds(200), quiet: .seconds(5))
        for _ in 0..<3 { _ = ticks.next(after: .tick(sent: false), quiet: true) }
        // A tick that sent something (a resend, what was left to send).
        #expect(ticks.next(after: .tick(sent: true), quiet: true) == .milliseconds(200))
        for _ in 0..<3 { _ = ticks.next(after: .tick(sent: false), quiet: true) }
        // Not idle, or a timer of the session pending (a hello, a message that may be due again).
        #expect(ticks.next(after: .tick(sent: false), quiet: false) == .milliseconds(200))
        for _ in 0..<3 { _ = ticks.next(after: .tick(sent: false), quiet: true) }
        #expect(ticks.next(after: .diagnostics, quiet: false) == .milliseconds(200))
        // A quiet interval below the base is the base.
        var fast = TickSchedule(base: .milliseconds(200), quiet: .milliseconds(50))
        #expect(fast.next(after: .tick(sent: false), quiet: true) == .milliseconds(200))
    }

    /// Ticks 2 ms apart while busy, at most 40 ms apart while idle: over 400 ms
    /// of rest the phone's session loop handles a handful of ticks, not ~200.
    /// A write made then still goes at once.
    @Test func anIdleSessionIsWokenRarely() async throws {
        let pair = try Pair()
        try pair.phone.setNow(1, for: TestKeys.daily["a"])
        let secret = PairingSecret.generate()
        let configuration = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let clock = IdleBenchmark.CountingClock()
        let phone = SyncPeer(store: pair.phone, configuration: configuration, clock: clock,
                             tickInterval: .milliseconds(2), quietTickInterval: .milliseconds(40))
        let watch = SyncPeer(store: pair.watch, configuration: configuration, tickInterval: .milliseconds(2), quietTickInterval: .milliseconds(40))
        let (a, b) = InMemoryConnection.makePair()
        let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        let outcome = await Result {
            try await eventually(pair.watch, "the phone's write") { try pair.watch.storedValue(for: TestKeys.daily["a"]) == 1 }
            try await phone.waitUntilIdle(timeout: waitLimit)
            try await watch.waitUntilIdle(timeout: waitLimit)
            let before = clock.count
            try await Task.sleep(for: .milliseconds(400))  // the span observed, not a wait for an event
            let handled = clock.count - before
            // 2 + 4 + 8 + 16 + 32 ms, then 40 ms apart: about 13 ticks (each 2 ms apart: about 200).
            #expect(handled < 30, "the idle phone's session loop handled \(handled) inputs in 400 ms")
            try pair.phone.setNow(2, for: TestKeys.daily["a"])
            try await eventually(pair.watch, "the write made at rest") { try pair.watch.storedValue(for: TestKeys.daily["a"]) == 2 }
        }
        await a.close()
        try await withDeadline("both peers to stop after the connection closed") { for task in tasks { _ = await task.value } }
        try outcome.get()
    }
}

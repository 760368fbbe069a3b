import Foundation
import Synchronization
@testable import SyncEngine
import SyncTransport
import Testing

/// A session at rest is not woken several times a second: its ticks grow
/// apart while it is idle, and anything it handles brings them back.
@Suite(.timeLimit(.minutes(5))) struct QuietTickTests {
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

    /// A tick (or external-change poll) interval of zero ticked in a loop that never
    /// rested: zero doubled is zero. The base is at least 1 ms, and it backs off.
    @Test func aZeroIntervalStillRestsAndBacksOff() {
        for base in [Duration.zero, .milliseconds(-5)] {
            var ticks = TickSchedule(base: base, quiet: .seconds(1))
            #expect(ticks.interval == .milliseconds(1))
            let waits = (0..<12).map { _ in ticks.next(after: .tick(sent: false), quiet: true) }
            #expect(waits.first == .milliseconds(2) && waits.last == .seconds(1))
        }
    }

    /// Ticks 2 ms apart while busy, at most 40 ms apart while idle: once the
    /// pair is idle the phone's ticks double up to 40 ms and stay there; a
    /// write made then still goes at once, and the ticks are 2 ms apart again.
    @Test func anIdleSessionIsWokenRarely() async throws {
        let pair = try Pair()
        try pair.phone.setNow(1, for: TestKeys.daily["a"])
        let secret = PairingSecret.generate()
        let configuration = ReplicationConfiguration(pairingEpoch: secret.epoch)
        let phone = SyncPeer(store: pair.phone, configuration: configuration, tickInterval: .milliseconds(2), quietTickInterval: .milliseconds(40))
        let watch = SyncPeer(store: pair.watch, configuration: configuration, tickInterval: .milliseconds(2), quietTickInterval: .milliseconds(40))
        let (a, b) = InMemoryConnection.makePair()
        let waits = pair.phone.timedWaits.subscribe()
        let tasks = [Task { await phone.run(over: a) }, Task { await watch.run(over: b) }]
        let outcome = await Result {
            try await eventually(pair.watch, "the phone's write") { try pair.watch.storedValue(for: TestKeys.daily["a"]) == 1 }
            let ticks = try await timedWaits(in: waits, until: .milliseconds(40), "the idle phone's ticks to reach 40 ms") {
                if case .tick(let wait) = $0 { wait } else { nil }
            }
            #expect(ticks.suffix(5) == [4, 8, 16, 32, 40].map { .milliseconds($0) }, "ticks after the pair went idle: \(ticks)")
            #expect(try await timedWaits(in: waits, until: .milliseconds(40), "the next idle tick") {
                if case .tick(let wait) = $0 { wait } else { nil }
            } == [.milliseconds(40)])
            try pair.phone.setNow(2, for: TestKeys.daily["a"])
            _ = try await timedWaits(in: waits, until: .milliseconds(2), "the ticks after a write to be 2 ms apart again") {
                if case .tick(let wait) = $0 { wait } else { nil }
            }
            try await eventually(pair.watch, "the write made at rest") { try pair.watch.storedValue(for: TestKeys.daily["a"]) == 2 }
        }
        await a.close()
        try await withDeadline("both peers to stop after the connection closed") { for task in tasks { _ = await task.value } }
        try outcome.get()
    }
}

/// The waits of one kind `stream` gives (`kind` picks them out), up to and
/// including the first that is `last`: the timers' schedule, followed event by event.
func timedWaits(in stream: AsyncStream<TimedWait>, until last: Duration, _ what: String,
                sourceLocation: SourceLocation = #_sourceLocation,
                _ kind: @escaping @Sendable (TimedWait) -> Duration?) async throws -> [Duration] {
    let seen = Mutex<[Duration]>([])
    _ = try await first(of: stream, what, sourceLocation: sourceLocation) { wait in
        guard let duration = kind(wait) else { return false }
        seen.withLock { $0.append(duration) }
        return duration == last
    }
    return seen.withLock { $0 }
}

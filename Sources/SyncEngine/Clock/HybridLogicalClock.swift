import Foundation
import Synchronization

/// The wall clock, injected: logic never reads `Date()` itself.
public protocol PhysicalClock: Sendable {
    /// Milliseconds since 1970.
    func nowMilliseconds() -> Int64
}

/// The real wall clock.
public struct SystemClock: PhysicalClock {
    public init() {}
    public func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// A clock that tests and the simulator set by hand, with a skew.
public final class ManualClock: PhysicalClock {
    private let state: Mutex<(now: Int64, skew: Int64)>

    public init(now: Int64 = 1_700_000_000_000, skewMilliseconds: Int64 = 0) {
        state = Mutex((now, skewMilliseconds))
    }

    public func nowMilliseconds() -> Int64 { state.withLock { $0.now + $0.skew } }
    /// Sets the true time (the skew is added on read).
    public func set(_ now: Int64) { state.withLock { $0.now = now } }
    public func advance(by milliseconds: Int64) { state.withLock { $0.now += milliseconds } }
    public func setSkew(_ milliseconds: Int64) { state.withLock { $0.skew = milliseconds } }
}

/// A hybrid logical clock (Kulkarni et al.): versions issued by one node only
/// grow, and a write made after seeing a remote version is ordered after it,
/// whatever the skew between the two physical clocks.
///
/// All arithmetic is checked: a wall clock outside `HLCTimestamp`'s range or a
/// clock already at the largest version makes `now()` throw
/// `clock-out-of-range`, never trap. `observe` ignores versions beyond
/// `HLCTimestamp.maxPacked`, and the store refuses remote versions too far
/// ahead of its wall clock before they reach here.
///
/// A clock given `maxAhead` (the store's `StoreOptions.maxRemoteClockAhead`)
/// stops following a time it issued further than that ahead of the wall
/// clock: the device's clock ran ahead (set to a wrong year) and was set
/// right. Every peer whose clock is right refuses such versions, so going on
/// from there would get every later write refused until the app restarted.
/// It goes on from the wall clock instead, or from the latest time it kept
/// within the bound (observed from a peer or a stored row, or issued before
/// the wall clock jumped ahead) — what a restart does: a reopened store's
/// floor leaves out rows past the bound.
public final class HybridLogicalClock: Sendable {
    private struct State {
        /// The latest packed time issued or observed.
        var last: Int64
        /// The latest time observed (from a peer, a stored row, the floor it
        /// started from) or issued before the wall clock jumped more than
        /// `maxAhead` past it: where it goes on from when it stops following `last`.
        var kept: Int64
    }

    private let physical: any PhysicalClock
    private let currentNode: Atomic<UInt32>
    private let state: Mutex<State>
    private let maxAhead: Duration?
    /// `maxAhead` in packed units (0 without it).
    private let aheadPacked: Int64
    /// Told the packed time it stopped following and the wall clock's milliseconds, after the lock.
    private let dropped: (@Sendable (_ packed: Int64, _ wallMilliseconds: Int64) -> Void)?

    /// The node id its versions carry (a store that takes a new node id,
    /// `SyncStore.renewNodeID()`, changes it).
    public var node: UInt32 { currentNode.load(ordering: .acquiring) }

    /// Versions issued from now on carry `node`.
    package func adopt(node: UInt32) { currentNode.store(node, ordering: .releasing) }

    /// `floor` is the largest packed time already used (e.g. read from disk),
    /// so a restart with a clock that went backwards never reissues a version.
    /// `maxAhead`: how far past the wall clock a time it issued may be followed
    /// (nil: always); `dropped` hears each time it stops following one.
    public init(node: UInt32, physical: any PhysicalClock, floor: Int64 = 0, maxAhead: Duration? = nil,
                dropped: (@Sendable (_ packed: Int64, _ wallMilliseconds: Int64) -> Void)? = nil) {
        self.currentNode = Atomic(node)
        self.physical = physical
        let floor = min(max(0, floor), HLCTimestamp.maxPacked)
        self.state = Mutex(State(last: floor, kept: floor))
        self.maxAhead = maxAhead
        let bound = maxAhead.map { SyncStore.versionBound(now: 0, ahead: $0) } ?? 0
        self.aheadPacked = bound
        self.dropped = dropped
    }

    /// The wall clock's milliseconds, checked against what a version holds.
    private func wallMilliseconds() throws -> Int64 {
        let milliseconds = physical.nowMilliseconds()
        guard (0...HLCTimestamp.maxPhysicalMilliseconds).contains(milliseconds) else {
            throw SyncError(.clockOutOfRange, "the wall clock reads \(milliseconds) ms since 1970, outside the range versions can hold (0...\(HLCTimestamp.maxPhysicalMilliseconds)); set the device clock")
        }
        return milliseconds
    }

    /// Under the lock, before a time is issued at wall clock `milliseconds`:
    /// stops following `last` when it is past the bound (returns it), and
    /// keeps `last` when the wall clock jumped past it by more than the bound.
    private func follow(_ state: inout State, milliseconds: Int64) -> Int64? {
        guard let maxAhead else { return nil }
        let wall = milliseconds << 16
        if wall > state.last, wall - state.last > aheadPacked, state.last > state.kept { state.kept = state.last }
        let bound = SyncStore.versionBound(now: milliseconds, ahead: maxAhead)
        guard state.last > bound else { return nil }
        let dropped = state.last
        state.last = state.kept <= bound ? state.kept : 0
        return dropped
    }

    private func report(_ drop: Int64?, milliseconds: Int64) {
        if let drop, let dropped { dropped(drop, milliseconds) }
    }

    /// Stops following a far-future time it issued once the wall clock reads
    /// far behind it (set right), as the next `now()` would, without issuing
    /// a time: `dropped` hears of it then. For a device that writes nothing
    /// after the correction (a session's tick and a queued round ask).
    /// Returns whether it stopped following one.
    @discardableResult
    public func followWallClock() -> Bool {
        guard maxAhead != nil, let milliseconds = try? wallMilliseconds() else { return false }
        var drop: Int64?
        state.withLock { drop = follow(&$0, milliseconds: milliseconds) }
        report(drop, milliseconds: milliseconds)
        return drop != nil
    }

    /// A new timestamp for a local event, greater than every earlier one.
    /// Throws `clock-out-of-range` when no larger version can be issued.
    public func now() throws -> HLCTimestamp {
        HLCTimestamp(packed: try reserve(1), node: node)
    }

    /// `count` new timestamps for local events at once, each greater than every
    /// earlier one: the packed times `first ..< first + count` (what `count`
    /// calls of `now()` within one millisecond return). Throws
    /// `clock-out-of-range` as `now()` does.
    ///
    /// `replacing`: the latest version the events replace (local writes over
    /// stored rows); they order after it when it is within the bound, though
    /// the clock stopped following a far-future time and went on from below it.
    public func reserve(_ count: Int, replacing replaced: Int64 = 0) throws -> Int64 {
        precondition(count > 0, "reserve at least one timestamp")
        let milliseconds = try wallMilliseconds()
        let wall = milliseconds << 16
        var drop: Int64?
        defer { report(drop, milliseconds: milliseconds) }
        return try state.withLock { state -> Int64 in
            drop = follow(&state, milliseconds: milliseconds)
            if replaced > state.last, replaced <= maxAhead.map({ SyncStore.versionBound(now: milliseconds, ahead: $0) }) ?? HLCTimestamp.maxPacked {
                state.last = replaced
            }
            let first: Int64
            if wall > state.last {
                first = wall
            } else {
                let (next, overflow) = state.last.addingReportingOverflow(1)
                guard !overflow else { throw HybridLogicalClock.exhausted }
                first = next
            }
            let (end, overflow) = first.addingReportingOverflow(Int64(count - 1))
            guard !overflow, end <= HLCTimestamp.maxPacked else { throw HybridLogicalClock.exhausted }
            state.last = end
            return first
        }
    }

    private static var exhausted: SyncError {
        SyncError(.clockOutOfRange, "the clock has reached the largest version it can issue; a version far in the future was observed — see StoreOptions.maxRemoteClockAhead")
    }

    /// Folds in a timestamp seen from the peer (or a stored row), so later
    /// local events order after it. A timestamp beyond `HLCTimestamp.maxPacked` is ignored.
    public func observe(_ remote: HLCTimestamp) {
        guard remote.packed <= HLCTimestamp.maxPacked else { return }
        state.withLock { state in
            if remote.packed > state.last { state.last = remote.packed }
            if remote.packed > state.kept { state.kept = remote.packed }
        }
    }

    /// The latest packed time issued or observed.
    public var latest: Int64 { state.withLock { $0.last } }
}

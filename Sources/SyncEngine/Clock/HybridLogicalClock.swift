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
public final class HybridLogicalClock: Sendable {
    private let physical: any PhysicalClock
    private let currentNode: Atomic<UInt32>
    private let last: Mutex<Int64>

    /// The node id its versions carry (a store that takes a new node id,
    /// `SyncStore.renewNodeID()`, changes it).
    public var node: UInt32 { currentNode.load(ordering: .acquiring) }

    /// Versions issued from now on carry `node`.
    package func adopt(node: UInt32) { currentNode.store(node, ordering: .releasing) }

    /// `floor` is the largest packed time already used (e.g. read from disk),
    /// so a restart with a clock that went backwards never reissues a version.
    public init(node: UInt32, physical: any PhysicalClock, floor: Int64 = 0) {
        self.currentNode = Atomic(node)
        self.physical = physical
        self.last = Mutex(min(max(0, floor), HLCTimestamp.maxPacked))
    }

    /// A new timestamp for a local event, greater than every earlier one.
    /// Throws `clock-out-of-range` when no larger version can be issued.
    public func now() throws -> HLCTimestamp {
        let milliseconds = physical.nowMilliseconds()
        guard (0...HLCTimestamp.maxPhysicalMilliseconds).contains(milliseconds) else {
            throw SyncError(.clockOutOfRange, "the wall clock reads \(milliseconds) ms since 1970, outside the range versions can hold (0...\(HLCTimestamp.maxPhysicalMilliseconds)); set the device clock")
        }
        let wall = milliseconds << 16
        let packed = try last.withLock { last -> Int64 in
            if wall > last {
                last = wall
                return last
            }
            let (next, overflow) = last.addingReportingOverflow(1)
            guard !overflow, next <= HLCTimestamp.maxPacked else {
                throw SyncError(.clockOutOfRange, "the clock has reached the largest version it can issue; a version far in the future was observed — see StoreOptions.maxRemoteClockAhead")
            }
            last = next
            return next
        }
        return HLCTimestamp(packed: packed, node: node)
    }

    /// `count` new timestamps for local events at once, each greater than every
    /// earlier one: the packed times `first ..< first + count` (what `count`
    /// calls of `now()` within one millisecond return). Throws
    /// `clock-out-of-range` as `now()` does.
    public func reserve(_ count: Int) throws -> Int64 {
        precondition(count > 0, "reserve at least one timestamp")
        let milliseconds = physical.nowMilliseconds()
        guard (0...HLCTimestamp.maxPhysicalMilliseconds).contains(milliseconds) else {
            throw SyncError(.clockOutOfRange, "the wall clock reads \(milliseconds) ms since 1970, outside the range versions can hold (0...\(HLCTimestamp.maxPhysicalMilliseconds)); set the device clock")
        }
        let wall = milliseconds << 16
        return try last.withLock { last -> Int64 in
            let first: Int64
            if wall > last {
                first = wall
            } else {
                let (next, overflow) = last.addingReportingOverflow(1)
                guard !overflow else { throw HybridLogicalClock.exhausted }
                first = next
            }
            let (end, overflow) = first.addingReportingOverflow(Int64(count - 1))
            guard !overflow, end <= HLCTimestamp.maxPacked else { throw HybridLogicalClock.exhausted }
            last = end
            return first
        }
    }

    private static var exhausted: SyncError {
        SyncError(.clockOutOfRange, "the clock has reached the largest version it can issue; a version far in the future was observed — see StoreOptions.maxRemoteClockAhead")
    }

    /// Folds in a timestamp seen from the peer, so later local events order
    /// after it. A timestamp beyond `HLCTimestamp.maxPacked` is ignored.
    public func observe(_ remote: HLCTimestamp) {
        guard remote.packed <= HLCTimestamp.maxPacked else { return }
        last.withLock { last in
            if remote.packed > last { last = remote.packed }
        }
    }

    /// The latest packed time issued or observed.
    public var latest: Int64 { last.withLock { $0 } }
}

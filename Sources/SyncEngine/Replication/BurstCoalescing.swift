/// How local commits that come in a burst (an app writing samples one by one,
/// each in its own transaction) share batches instead of each sending its own.
///
/// The pause before a commit is the writer's: from when the commit before it
/// was made to when this one's write began, so a slow commit (a large value,
/// a slow device) does not make the next look like the end of a pause.
///
/// A commit is sent at once when the link is idle (nothing in flight) or when
/// it ends a pause of at least `gap` since the commit before it (a single
/// write, even while an earlier one awaits its acknowledgement). A commit that
/// follows the previous one within `gap` while a batch is in flight waits to
/// join the next batch, for `gap` (and as long again as its own commit took)
/// at most, and goes as soon as the acknowledgement it waits behind empties
/// the window. A quick commit made
/// while another waits is a burst (a writer that waits for each write to be
/// visible never makes one, however quick, and must not wait `pause`), which
/// lasts until a pause of `pause` (a thread descheduled for a moment does not
/// end it); its commits wait to join the next batch, which goes out when the
/// burst pauses or the oldest waiting commit has waited `maxDelay`
/// (acknowledgements arriving meanwhile do not send it, and the burst's later
/// commits join it even once nothing is in flight). What waited then goes
/// out as usual: in batches of at most `maxBatchEntries`, as far as the
/// window allows.
public struct BurstCoalescing: Sendable, Equatable {
    /// A commit whose write began this soon after the commit before it waits
    /// while a batch is in flight; another as quick while it waits starts a
    /// burst. A writer in a loop begins its next write a few µs after the
    /// last one; one that waits for each write to be visible on the peer, a
    /// round trip and two commits later (100 µs at the least over loopback).
    public var gap: Duration
    /// A burst ends at a writer's pause (a commit to the next write's start) of at least this (never less than `gap`).
    public var pause: Duration
    /// The longest a commit waits to join a batch.
    public var maxDelay: Duration

    public init(gap: Duration = .microseconds(100), pause: Duration = .milliseconds(1), maxDelay: Duration = .milliseconds(10)) {
        self.gap = gap
        self.pause = max(pause, gap)
        self.maxDelay = maxDelay
    }
}

/// The endpoint's record of the local commits it holds back (`BurstCoalescing`).
struct CoalescingState {
    /// When the session loop last heard of a local commit.
    var lastChange: ContinuousClock.Instant?
    /// When the oldest commit held back arrived; nil when none is held.
    var heldSince: ContinuousClock.Instant?
    /// Whether the commits heard of last are a burst: a commit within `gap`
    /// of the one before while another waited, lasting until a pause of `pause`.
    var inBurst = false
    /// How long the write of the last commit heard of took, from its start to its commit.
    var lastDuration = Duration.zero

    /// Whether a commit made at `instant` (the one before it at `previous`;
    /// nil: the last one this state heard of), whose write began at
    /// `startedAt` (nil: at `instant`), waits, given whether a batch is in
    /// flight. `alreadyRead`: the stream was read past it (its wake-up came
    /// after a pump sent it), so nothing waits, but it still counts for the intervals.
    mutating func holds(at instant: ContinuousClock.Instant, previous: ContinuousClock.Instant? = nil,
                        startedAt: ContinuousClock.Instant? = nil,
                        policy: BurstCoalescing, inFlight: Bool, alreadyRead: Bool = false) -> Bool {
        let began = min(startedAt ?? instant, instant)
        // The writer's pause: a write that began before the previous commit (another thread's) paused for none.
        let interval = (previous ?? lastChange).map { max(.zero, began - $0) }
        lastDuration = instant - began
        let quick = interval.map { $0 < policy.gap } == true
        // Quick commits alone are no burst: a writer that waits for each write to be visible
        // makes them whenever its writes travel faster than `gap`, but never one while another waits.
        inBurst = (quick && heldSince != nil) || (inBurst && interval.map { $0 < policy.pause } == true)
        lastChange = max(lastChange ?? instant, instant)
        // Held though sent, it would make the next quick commit a burst, which waits `pause`.
        if alreadyRead { return false }
        // Once commits are held, the burst goes on filling the next batch even
        // if the acknowledgements emptied the window meanwhile.
        guard quick || inBurst, inFlight || heldSince != nil else { return false }
        let since = heldSince ?? instant
        guard instant - since < policy.maxDelay else { return false }
        heldSince = since
        return true
    }

    /// When the held commits go out if no acknowledgement sends them first.
    func deadline(policy: BurstCoalescing) -> ContinuousClock.Instant? {
        guard let heldSince, let lastChange else { return nil }
        // A commit held alone waits for the next of a burst: `gap` of pause, then as long a commit.
        return min(lastChange + (inBurst ? policy.pause : policy.gap + lastDuration), heldSince + policy.maxDelay)
    }
}

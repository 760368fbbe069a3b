import Logging
import Synchronization

/// At most `burst` reports at once, then one more per `interval`: a token
/// bucket. Used for what strangers can trigger at will (rejected handshakes),
/// so that a flood costs a bounded number of log lines and events.
public struct RateLimit: Sendable, Hashable {
    /// Reports allowed back to back.
    public var burst: Int
    /// One more report is allowed each `interval`.
    public var interval: Duration

    /// Creates a limit; the default allows 10 at once, then one a second.
    public init(burst: Int = 10, interval: Duration = .seconds(1)) {
        self.burst = burst
        self.interval = interval
    }
}

/// The token bucket behind `RateLimit`, as a pure value: the caller passes the time.
struct TokenBucket: Sendable {
    let limit: RateLimit
    private(set) var tokens: Double
    private var last: ContinuousClock.Instant

    init(limit: RateLimit, now: ContinuousClock.Instant) {
        self.limit = limit
        tokens = Double(max(1, limit.burst))
        last = now
    }

    private var capacity: Double { Double(max(1, limit.burst)) }

    private mutating func refill(now: ContinuousClock.Instant) {
        guard now > last else { return }
        if limit.interval > .zero {
            tokens = min(capacity, tokens + (now - last) / limit.interval)
        } else {
            tokens = capacity
        }
        last = now
    }

    /// Takes a token if one is there.
    mutating func take(now: ContinuousClock.Instant) -> Bool {
        refill(now: now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// When the next token will be there.
    mutating func nextToken(now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        refill(now: now)
        guard tokens < 1 else { return now }
        return now + limit.interval * (1 - tokens)
    }
}

/// Logs and publishes the listener's rejections within a `RateLimit`: a
/// rejection beyond the limit is counted, not reported; the count goes with
/// the next report (`TCPListener.Rejection.suppressed`), which comes as soon
/// as the limit allows it, or when the listener closes.
final class RejectionReporter: Sendable {
    private struct State {
        var bucket: TokenBucket
        var suppressed = 0
        var lastSuppressed: TCPListener.Rejection?
        var flushScheduled = false
        var flush: Task<Void, Never>?
        var finished = false
    }

    let rejections: AsyncStream<TransportError>
    let reports: AsyncStream<TCPListener.Rejection>
    private let rejectionSink: AsyncStream<TransportError>.Continuation
    private let reportSink: AsyncStream<TCPListener.Rejection>.Continuation
    private let logger: Logger
    private let state: Mutex<State>

    init(limit: RateLimit, logger: Logger) {
        (rejections, rejectionSink) = AsyncStream.makeStream(of: TransportError.self, bufferingPolicy: .bufferingNewest(64))
        (reports, reportSink) = AsyncStream.makeStream(of: TCPListener.Rejection.self, bufferingPolicy: .bufferingNewest(64))
        self.logger = logger
        state = Mutex(State(bucket: TokenBucket(limit: limit, now: .now)))
    }

    /// Reports a rejection of the peer at `peer` (an address) now, or counts it for a later report.
    func report(_ reason: TransportError, peer: String? = nil) {
        enum Decision { case publish(TCPListener.Rejection), schedule(ContinuousClock.Instant), count }
        let decision = state.withLock { state -> Decision in
            guard !state.finished else { return .count }
            let now = ContinuousClock.now
            if state.bucket.take(now: now) {
                defer {
                    state.suppressed = 0
                    state.lastSuppressed = nil
                }
                return .publish(TCPListener.Rejection(reason: reason, suppressed: state.suppressed, peer: peer))
            }
            state.suppressed += 1
            state.lastSuppressed = TCPListener.Rejection(reason: reason, suppressed: 0, peer: peer)
            guard !state.flushScheduled else { return .count }
            state.flushScheduled = true
            return .schedule(state.bucket.nextToken(now: now))
        }
        switch decision {
        case .publish(let rejection): publish(rejection)
        case .schedule(let when): scheduleFlush(at: when)
        case .count: break
        }
    }

    /// Reports what is still counted, then finishes both streams.
    func finish() {
        let (pending, flush) = state.withLock { state -> (TCPListener.Rejection?, Task<Void, Never>?) in
            state.finished = true
            defer {
                state.flush = nil
                state.suppressed = 0
                state.lastSuppressed = nil
            }
            return (Self.summary(state), state.flush)
        }
        flush?.cancel()
        if let pending { publish(pending) }
        rejectionSink.finish()
        reportSink.finish()
    }

    /// The last counted rejection, standing for itself and the others counted.
    private static func summary(_ state: State) -> TCPListener.Rejection? {
        guard var last = state.lastSuppressed, state.suppressed > 0 else { return nil }
        last.suppressed = state.suppressed - 1
        return last
    }

    private func scheduleFlush(at when: ContinuousClock.Instant) {
        let task = Task { [self] in
            var deadline = when
            while true {
                do { try await Task.sleep(until: deadline.cappedForSleep, clock: .continuous) } catch { return }
                let (rejection, next) = state.withLock { state -> (TCPListener.Rejection?, ContinuousClock.Instant?) in
                    guard !state.finished else { return (nil, nil) }
                    let now = ContinuousClock.now
                    guard state.suppressed > 0 else {
                        state.flushScheduled = false
                        return (nil, nil)
                    }
                    guard state.bucket.take(now: now) else { return (nil, state.bucket.nextToken(now: now)) }
                    defer {
                        state.flushScheduled = false
                        state.suppressed = 0
                        state.lastSuppressed = nil
                    }
                    return (Self.summary(state), nil)
                }
                if let rejection { publish(rejection) }
                guard let next else { return }
                deadline = next
            }
        }
        state.withLock { state in
            if state.finished { task.cancel() } else { state.flush = task }
        }
    }

    private func publish(_ rejection: TCPListener.Rejection) {
        var metadata: Logger.Metadata = ["reason": "\(rejection.reason)", "code": "\(rejection.reason.code)"]
        if let peer = rejection.peer { metadata["peer"] = "\(peer)" }
        if rejection.suppressed > 0 { metadata["suppressed"] = "\(rejection.suppressed)" }
        logger.warning("rejected the peer during the handshake", metadata: metadata)
        rejectionSink.yield(rejection.reason)
        reportSink.yield(rejection)
    }
}

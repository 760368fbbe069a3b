/// A deterministic model of the link between two ends, in virtual
/// milliseconds: no tasks, no real time, no I/O.
///
/// `send` encodes the frame with the codec (so wire sizes are real) and
/// schedules its delivery to the other end, applying the `faults`;
/// `deliverDue(at:)` hands back what has arrived by then, decoded. All
/// randomness comes from a `SeededRandom`: the same seed and the same calls
/// give the same deliveries. Every `send` draws the same amount of
/// randomness whatever the outcome, so changing one fault does not reshuffle
/// the others.
///
/// Fault semantics:
/// - loss: the frame is dropped with probability `lossRate`;
/// - duplication: with probability `duplicateRate` a second copy is
///   delivered, with its own jitter (it takes no extra bandwidth);
/// - latency and jitter: `latencyMs + uniform(0...jitterMs)` after departure;
/// - reordering: with probability `reorderRate` a copy is held back by
///   `latencyMs + jitterMs + 1 + uniform(0...max(1, latencyMs))` ms, so
///   frames sent shortly after overtake it;
/// - bandwidth: each direction transmits one frame at a time at
///   `bandwidthBytesPerSecond` (non-positive means unlimited); a frame
///   departs when its transmission ends;
/// - partition: frames sent while partitioned are dropped, and so are frames
///   that come due while partitioned.
package struct SimulatedLink: Sendable {
    private struct InFlight: Sendable {
        var deliverAt: Int64
        var sequence: UInt64
        var to: LinkEnd
        var bytes: [UInt8]
    }

    /// The faults applied from now on; frames already in flight keep their schedule.
    package var faults: LinkFaults
    /// The codec that encodes frames to count and carry their wire bytes.
    package let codec: FrameCodec
    /// Per-end counters.
    package private(set) var statistics: [LinkEnd: LinkStatistics] = [.a: LinkStatistics(), .b: LinkStatistics()]

    private var random: SeededRandom
    private var inFlight: [InFlight] = []
    private var nextSequence: UInt64 = 0
    private var directionFreeAt: [LinkEnd: Int64] = [:]

    /// Creates a link whose randomness is determined by `seed`.
    package init(seed: UInt64, faults: LinkFaults = .init(), codec: FrameCodec = .init()) {
        self.faults = faults
        self.codec = codec
        self.random = SeededRandom(seed: seed)
    }

    /// The seed the link's randomness started from.
    package var seed: UInt64 { random.seed }

    /// The number of frame copies scheduled but not delivered yet.
    package var inFlightCount: Int { inFlight.count }

    /// The virtual time of the earliest scheduled delivery, if any.
    package var nextDeliveryTime: Int64? { inFlight.first?.deliverAt }

    /// Counters for one end.
    package func statistics(for end: LinkEnd) -> LinkStatistics {
        statistics[end] ?? LinkStatistics()
    }

    /// Sends `frame` from `end` at virtual time `nowMs` and schedules its
    /// delivery to the other end. Returns the envelope's size in bytes on the
    /// wire (0 if the codec refused the frame, which counts as dropped).
    @discardableResult
    package mutating func send(_ frame: Frame, from end: LinkEnd, at nowMs: Int64) -> Int {
        statistics[end, default: .init()].framesSent += 1
        statistics[end, default: .init()].payloadBytesSent += frame.payload.count

        // Fixed draws, whatever the outcome.
        let lost = random.nextBool(probability: faults.lossRate)
        let duplicated = random.nextBool(probability: faults.duplicateRate)
        let latency = Int64(max(0, faults.latencyMs))
        let jitter = Int64(max(0, faults.jitterMs))
        let copies = (0..<2).map { _ in
            (
                jitter: Int64(random.nextInt(in: 0...Int(jitter))),
                reordered: random.nextBool(probability: faults.reorderRate),
                holdBack: latency + jitter + 1 + Int64(random.nextInt(in: 0...Int(max(1, latency))))
            )
        }

        guard let bytes = try? codec.encode(frame) else {
            statistics[end, default: .init()].framesDropped += 1
            return 0
        }
        statistics[end, default: .init()].bytesSent += bytes.count
        if lost || faults.partitioned {
            statistics[end, default: .init()].framesDropped += 1
            return bytes.count
        }

        var departure = nowMs
        if let rate = faults.bandwidthBytesPerSecond, rate > 0 {
            let start = max(nowMs, directionFreeAt[end] ?? nowMs)
            let transmission = (Int64(bytes.count) * 1000 + Int64(rate) - 1) / Int64(rate)
            departure = start + transmission
            directionFreeAt[end] = departure
        }
        for (index, copy) in copies.enumerated() where index == 0 || duplicated {
            let arrival = departure + latency + copy.jitter + (copy.reordered ? copy.holdBack : 0)
            schedule(InFlight(deliverAt: arrival, sequence: nextSequence, to: end.other, bytes: bytes))
            nextSequence += 1
        }
        if duplicated { statistics[end, default: .init()].framesDuplicated += 1 }
        return bytes.count
    }

    /// Removes and returns every frame due at or before `nowMs`, decoded, in
    /// delivery-time order; frames due at the same time keep the order in
    /// which they were scheduled.
    package mutating func deliverDue(at nowMs: Int64) -> [(to: LinkEnd, frame: Frame)] {
        let dueCount = inFlight.prefix { $0.deliverAt <= nowMs }.count
        guard dueCount > 0 else { return [] }
        let due = inFlight[0..<dueCount]
        inFlight.removeSubrange(0..<dueCount)
        var delivered: [(to: LinkEnd, frame: Frame)] = []
        for item in due {
            guard !faults.partitioned, let frame = try? codec.decode(item.bytes) else {
                statistics[item.to.other, default: .init()].framesDropped += 1
                continue
            }
            statistics[item.to, default: .init()].framesReceived += 1
            statistics[item.to, default: .init()].bytesReceived += item.bytes.count
            delivered.append((to: item.to, frame: frame))
        }
        return delivered
    }

    /// Drops every frame in flight (a connection reset), counting each as
    /// dropped by its sender, and forgets any bandwidth backlog.
    package mutating func dropInFlight() {
        for item in inFlight {
            statistics[item.to.other, default: .init()].framesDropped += 1
        }
        inFlight.removeAll()
        directionFreeAt.removeAll()
    }

    private mutating func schedule(_ item: InFlight) {
        // Binary search for the first later (deliverAt, sequence).
        var low = 0
        var high = inFlight.count
        while low < high {
            let mid = (low + high) / 2
            let other = inFlight[mid]
            if (other.deliverAt, other.sequence) <= (item.deliverAt, item.sequence) {
                low = mid + 1
            } else {
                high = mid
            }
        }
        inFlight.insert(item, at: low)
    }
}

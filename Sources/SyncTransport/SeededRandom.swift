/// A small, fast, seeded pseudo-random generator (xoshiro256**, seeded
/// through SplitMix64). Same seed, same sequence, on every platform and
/// toolchain: use its own helpers (`nextDouble`, `next(below:)`,
/// `nextInt(in:)`) rather than the standard library's `random(in:using:)`,
/// whose algorithm may change between Swift releases. Not for secrets.
public struct SeededRandom: RandomNumberGenerator, Sendable, Hashable {
    /// The seed this generator started from, for reproducing a run.
    public let seed: UInt64
    private var state: (UInt64, UInt64, UInt64, UInt64)

    /// Creates a generator whose whole sequence is determined by `seed`.
    public init(seed: UInt64) {
        self.seed = seed
        var mixer = seed
        func splitMix() -> UInt64 {
            mixer &+= 0x9E37_79B9_7F4A_7C15
            var z = mixer
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        state = (splitMix(), splitMix(), splitMix(), splitMix())
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        let result = rotateLeft(state.1 &* 5, 7) &* 9
        let t = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= t
        state.3 = rotateLeft(state.3, 45)
        return result
    }

    /// A uniform double in `0..<1` (53 random bits).
    public mutating func nextDouble() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// A uniform integer in `0..<bound` (unbiased); 0 when `bound` is 0.
    public mutating func next(below bound: UInt64) -> UInt64 {
        guard bound > 0 else { return 0 }
        // Lemire's multiply-and-reject.
        var product = next().multipliedFullWidth(by: bound)
        if product.low < bound {
            let threshold = (0 &- bound) % bound
            while product.low < threshold {
                product = next().multipliedFullWidth(by: bound)
            }
        }
        return product.high
    }

    /// A uniform integer in `range`.
    public mutating func nextInt(in range: ClosedRange<Int>) -> Int {
        let width = UInt64(bitPattern: Int64(range.upperBound) &- Int64(range.lowerBound))
        if width == .max { return Int(truncatingIfNeeded: next()) }
        return range.lowerBound &+ Int(truncatingIfNeeded: next(below: width + 1))
    }

    /// `true` with the given probability (clamped to 0...1). Always draws
    /// one number, so the sequence does not depend on the probability.
    public mutating func nextBool(probability: Double) -> Bool {
        nextDouble() < probability
    }

    /// A new generator seeded from this one, for an independent stream.
    public mutating func split() -> SeededRandom {
        SeededRandom(seed: next())
    }

    /// Equal when seeded alike and at the same position.
    public static func == (lhs: SeededRandom, rhs: SeededRandom) -> Bool {
        lhs.seed == rhs.seed && lhs.state == rhs.state
    }

    /// Hashes the seed and position.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(seed)
        hasher.combine(state.0)
        hasher.combine(state.1)
        hasher.combine(state.2)
        hasher.combine(state.3)
    }
}

private func rotateLeft(_ value: UInt64, _ count: UInt64) -> UInt64 {
    (value << count) | (value >> (64 - count))
}

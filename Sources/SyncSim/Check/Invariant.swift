/// The invariants the simulator checks, by their report names.
public enum Invariant: String, Sendable, CaseIterable, Codable {
    case convergence
    case noLostAcknowledgedWrite = "no-lost-acknowledged-write"
    case noResurrection = "no-resurrection"
    case placement
    case direction
    case largeValuesManual = "large-values-manual"
    /// An entry of a `manual` key leaves the node that wrote it only after a
    /// `sync` on that node made after the write.
    case manualUntilSync = "manual-until-sync"
    /// Every live value of a key declared `encrypted` is stored encrypted on
    /// every node that holds it, written there or received.
    case encryptedAtRest = "encrypted-at-rest"
    /// Scenarios with a mailbox: nothing is refused, and once both ends ran
    /// their rounds to quiescence neither spool holds a message.
    case queuedDelivery = "queued-delivery"
    /// A value the app saw go from a watch (a remote removal) never comes back
    /// at the version it went with: a re-baseline removes only what its
    /// baseline does not bring back, never a live value that it sets again.
    case noFlicker = "no-flicker"
}

/// The outcome of one invariant over a run.
public struct InvariantResult: Sendable, Equatable, Codable {
    public var name: String
    public var passed: Bool
    /// How many times it was checked (frames, or checkpoints and the end).
    public var checks: Int
    /// The first violations (keys and versions, never values).
    public var violations: [String]
    /// Violations beyond those listed.
    public var moreViolations: Int

    public init(name: String, passed: Bool = true, checks: Int = 0, violations: [String] = [], moreViolations: Int = 0) {
        self.name = name
        self.passed = passed
        self.checks = checks
        self.violations = violations
        self.moreViolations = moreViolations
    }
}

/// Collects violations per invariant, keeping the first few messages.
struct ViolationLog {
    private(set) var results: [Invariant: InvariantResult] = Dictionary(uniqueKeysWithValues: Invariant.allCases.map { ($0, InvariantResult(name: $0.rawValue)) })
    static let kept = 5

    mutating func checked(_ invariant: Invariant, count: Int = 1) {
        results[invariant]!.checks += count
    }

    mutating func violate(_ invariant: Invariant, _ message: String) {
        results[invariant]!.passed = false
        if results[invariant]!.violations.count < ViolationLog.kept {
            if !results[invariant]!.violations.contains(message) { results[invariant]!.violations.append(message) }
        } else {
            results[invariant]!.moreViolations += 1
        }
    }

    var ordered: [InvariantResult] { Invariant.allCases.map { results[$0]! } }
}

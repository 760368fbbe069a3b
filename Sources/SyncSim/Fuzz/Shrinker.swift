/// Shrinks a failing scenario by removing timeline steps while it still
/// fails one of the same invariants (delta debugging: halves, then smaller
/// chunks, down to single steps).
public struct Shrinker: Sendable {
    /// The most scenario runs one shrink may spend.
    public var maxRuns: Int
    public var options: RunOptions
    /// The link each candidate runs over (over `.tcp` a candidate is kept when
    /// it failed once).
    public var transport: SimTransport

    /// `maxRuns`: by default 1,000 over `.sim` (a failing scenario of several
    /// hundred steps needs that many to come down to a few dozen) and 300
    /// over `.tcp`, where each run takes real time.
    public init(maxRuns: Int? = nil, options: RunOptions = RunOptions(), transport: SimTransport = .sim) {
        self.maxRuns = maxRuns ?? (transport == .sim ? 1_000 : 300)
        self.options = options
        self.transport = transport
    }

    /// Whether `scenario` fails one of `invariants` (or fails to run when `invariants` is empty).
    func fails(_ scenario: Scenario, _ invariants: Set<String>) async -> Bool {
        let outcome = await Simulation.run(scenario, name: "shrink", options: options, transport: transport)
        guard let report = outcome.report else { return outcome.runError != nil }
        return !invariants.isDisjoint(with: report.failedInvariants) || (invariants.isEmpty && !report.passed)
    }

    /// The smallest failing scenario found within the budget.
    public func shrink(_ scenario: Scenario, failing invariants: Set<String>) async -> Scenario {
        var current = scenario
        var runs = 0
        var chunk = max(1, current.timeline.count / 2)
        while chunk >= 1 && runs < maxRuns {
            var index = 0
            var removedAny = false
            while index < current.timeline.count && runs < maxRuns {
                var candidate = current
                candidate.timeline.removeSubrange(index..<min(current.timeline.count, index + chunk))
                runs += 1
                if await fails(candidate, invariants) {
                    current = candidate
                    removedAny = true
                } else {
                    index += chunk
                }
            }
            if chunk == 1 && !removedAny { break }
            chunk = chunk == 1 ? 1 : chunk / 2
            if chunk == 1 && !removedAny && runs >= maxRuns { break }
        }
        // Drop keys no step uses.
        let used = Set(current.timeline.compactMap { step -> String? in
            switch step.action {
            case .put(_, let key, _, _), .delete(_, let key): key
            default: nil
            }
        })
        // Drop watches no step names (the links of the rest stay as they were).
        let highest = current.timeline.map { Shrinker.highestWatch(named: $0.action) }.max() ?? 1
        if highest < current.watches, runs < maxRuns {
            var fewer = current
            fewer.watches = max(1, highest)
            fewer.olderApps = fewer.olderApps.filter { $0.key.watchNumber <= fewer.watches }
            fewer.olderProtocols = fewer.olderProtocols.filter { $0.key.watchNumber <= fewer.watches }
            runs += 1
            if await fails(fewer, invariants) { current = fewer }
        }
        var trimmed = current
        trimmed.keys = current.keys.filter { k in used.contains { $0 == k.name || $0.hasPrefix(k.name + ":") } }
        if trimmed.keys.isEmpty { trimmed.keys = Array(current.keys.prefix(1)) }
        trimmed.olderApps = trimmed.olderApps.mapValues { older in older.filter { k in trimmed.keys.contains { $0.name == k.name } } }
        Shrinker.dropSameApps(&trimmed)
        if runs < maxRuns + 1, await fails(trimmed, invariants) { current = trimmed }
        // Without older apps at all, if it still fails so.
        if !current.olderApps.isEmpty, runs < maxRuns + 2 {
            var sameApps = current
            sameApps.olderApps = [:]
            Shrinker.dropSameApps(&sameApps)
            if await fails(sameApps, invariants) { current = sameApps }
        }
        // Without older protocols at all, if it still fails so.
        if !current.olderProtocols.isEmpty, runs < maxRuns + 3 {
            var sameProtocols = current
            sameProtocols.olderProtocols = [:]
            Shrinker.dropSameApps(&sameProtocols)
            if await fails(sameProtocols, invariants) { current = sameProtocols }
        }
        current.description = "shrunk reproduction: " + scenario.description
        return current
    }

    /// Drops the older apps that declare what `keys` declares (no older app
    /// after all), and the `updateApp` steps of nodes left without one (nor
    /// an older protocol).
    static func dropSameApps(_ scenario: inout Scenario) {
        let keys = scenario.keys
        scenario.olderApps = scenario.olderApps.filter { _, older in
            older.count != keys.count || !older.allSatisfy { k in keys.contains { Scenario.declaredAlike($0, k) } }
        }
        let older = Set(scenario.olderApps.keys).union(scenario.olderProtocols.keys)
        scenario.timeline.removeAll { step in
            if case .updateApp(let node) = step.action { !older.contains(node) } else { false }
        }
    }

    /// The number of the highest watch a step names (1 when it names none).
    static func highestWatch(named action: Scenario.Action) -> Int {
        let node: ScenarioNode? = switch action {
        case .put(let n, _, _, _), .delete(let n, _), .sync(let n), .requestManual(let n), .crash(let n), .restart(let n), .skew(let n, _), .powerCut(let n, _),
             .purge(let n), .updateApp(let n), .fillDisk(let n), .freeDisk(let n): n
        case .faults(_, let n), .partition(let n), .heal(let n): n
        case .replaceWatch(let n, let source, _): [n, source].compactMap { $0 }.max()
        case .checkpoint: nil
        }
        return max(1, node?.watchNumber ?? 1)
    }
}

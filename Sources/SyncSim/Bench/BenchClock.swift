import Foundation
import SyncEngine
import SyncTransport

/// Wall-clock measurement for benchmarks only (never in tests' assertions).
enum BenchClock {
    static func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = ContinuousClock.now
        try body()
        return seconds(since: start)
    }

    static func seconds(_ body: () async throws -> Void) async rethrows -> Double {
        let start = ContinuousClock.now
        try await body()
        return seconds(since: start)
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        seconds(ContinuousClock.now - start)
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// CPU seconds (user + system) this process has used so far, all threads.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(PortablePOSIX.resourceUsageOfSelf, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// Context switches of this process so far, voluntary (a thread waited)
    /// and involuntary (a thread was preempted).
    static func processContextSwitches() -> Int {
        var usage = rusage()
        getrusage(PortablePOSIX.resourceUsageOfSelf, &usage)
        return Int(usage.ru_nvcsw) + Int(usage.ru_nivcsw)
    }

    /// A fresh temporary folder for one benchmark run.
    static func temporaryFolder() throws -> String {
        let path = NSTemporaryDirectory() + "syncsim-bench-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

/// A phone's and a watch's store (`phone.sqlite`, `watch.sqlite`) in a fresh
/// temporary folder; `remove()` closes them and deletes the folder.
final class BenchStores {
    let folder: String
    let phone: SyncStore
    let watch: SyncStore

    init(registry: KeyRegistry) throws {
        folder = try BenchClock.temporaryFolder()
        do {
            phone = try SyncStore(path: folder + "/phone.sqlite", role: .phone, registry: registry)
            watch = try SyncStore(path: folder + "/watch.sqlite", role: .watch, registry: registry)
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
    }

    func remove() {
        phone.close()
        watch.close()
        try? FileManager.default.removeItem(atPath: folder)
    }
}

/// One measured figure, with the machine's own limit beside it.
public struct BenchFigure: Sendable, Codable, Equatable {
    public let name: String
    public let value: Double
    public let unit: String
    /// The raw limit measured in the same run, when the figure has one.
    public let baseline: Double?
    public let baselineName: String?
    /// value ÷ baseline (or baseline ÷ value for times), higher is better.
    public let ratio: Double?
    public let target: String?

    public init(name: String, value: Double, unit: String, baseline: Double? = nil, baselineName: String? = nil, ratio: Double? = nil, target: String? = nil) {
        self.name = name
        self.value = value
        self.unit = unit
        self.baseline = baseline
        self.baselineName = baselineName
        self.ratio = ratio
        self.target = target
    }

    /// One table line.
    public var line: String { line(nameWidth: 44) }

    /// Each figure of `runs` (the same suite run again and again) as the
    /// median of its runs: value, baseline and ratio each their own median,
    /// so a ratio is still one taken within a run. In the order of the first
    /// run; a figure missing from some runs is the median of those it is in.
    public static func medians(of runs: [[BenchFigure]]) -> [BenchFigure] {
        func median(_ values: [Double]) -> Double? {
            guard !values.isEmpty else { return nil }
            let sorted = values.sorted()
            let middle = sorted.count / 2
            return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
        }
        var names: [String] = []
        var byName: [String: [BenchFigure]] = [:]
        for figure in runs.joined() {
            if byName[figure.name] == nil { names.append(figure.name) }
            byName[figure.name, default: []].append(figure)
        }
        return names.map { name in
            let figures = byName[name]!
            let first = figures[0]
            return BenchFigure(name: name, value: median(figures.map(\.value))!, unit: first.unit,
                               baseline: median(figures.compactMap(\.baseline)), baselineName: first.baselineName,
                               ratio: median(figures.compactMap(\.ratio)), target: first.target)
        }
    }

    /// One table line with the name padded to `nameWidth` (never cut).
    /// Small values (ratios, bytes per entry) keep three decimals.
    public func line(nameWidth: Int) -> String {
        let number = String(format: abs(value) < 10 ? "%14.3f" : "%14.1f", value)
        var text = "\(name.padding(toLength: max(nameWidth, name.count), withPad: " ", startingAt: 0)) \(number) \(unit)"
        if let baseline, let baselineName {
            text += "   vs \(baselineName) \(String(format: abs(baseline) < 10 ? "%.3f" : "%.1f", baseline))"
        }
        if let ratio { text += "   ratio \(String(format: "%.3f", ratio))" }
        if let target { text += "   (target \(target))" }
        return text
    }
}

import ArgumentParser
import Foundation
@_spi(Benchmarks) import SyncEngine
@_spi(Benchmarks) import SyncTransport

/// What the sync benchmarks write: `random`, ~200-byte JSON strings from a
/// seeded generator (`bench:k<i>`), or `family`, one family of small JSON
/// objects of one fixed shape with a long repeated string field (`heart:k<i>`),
/// where per-entry metadata weighs most against the values.
public enum BenchWorkload: String, ExpressibleByArgument, CaseIterable, Sendable, Codable {
    case random, family
}

/// One heart-rate sample: the `family` workload's value.
struct HeartSample: Codable, Sendable, Equatable {
    var id: Int
    var bpm: Int
    var zone: Int
    var source: String

    static let source = "com.example.health.watchapp/heart-rate/optical-sensor/continuous-background-measurement"
}

/// The rows of one workload: their keys, typed writes and encoded bytes.
struct BenchRows: Sendable {
    static let samples = KeyFamily<HeartSample>("heart", default: HeartSample(id: 0, bpm: 0, zone: 0, source: ""),
                                                availability: .all, policy: .automaticSmall)

    let workload: BenchWorkload
    let count: Int
    private let strings: [String]
    private let bpms: [Int]

    init(_ workload: BenchWorkload, count: Int, seed: UInt64 = 42) {
        self.workload = workload
        self.count = count
        switch workload {
        case .random:
            strings = SyncBenchmark.values(count: count, seed: seed)
            bpms = []
        case .family:
            strings = []
            var random = SeededRandom(seed: seed)
            bpms = (0..<count).map { _ in 55 + Int(random.next(below: 80)) }
        }
    }

    /// Both workloads' families, so one registry serves either.
    static func registry() throws -> KeyRegistry { try KeyRegistry([SyncBenchmark.family, samples]) }

    /// The entry key of row `i`.
    func key(_ i: Int) -> String { (workload == .random ? "bench:k" : "heart:k") + "\(i)" }

    private func sample(_ i: Int, changed: Bool) -> HeartSample {
        HeartSample(id: i, bpm: bpms[i] + (changed ? 1 : 0), zone: bpms[i] / 30, source: HeartSample.source)
    }

    /// Writes rows `range` (their changed values when `changed`).
    func write(_ range: Range<Int>, changed: Bool = false, into batch: inout WriteBatch) throws {
        for i in range {
            switch workload {
            case .random: try batch.set(strings[i] + (changed ? "!" : ""), for: SyncBenchmark.family["k\(i)"])
            case .family: try batch.set(sample(i, changed: changed), for: BenchRows.samples["k\(i)"])
            }
        }
    }

    /// The serialized value of row `i`, as the store holds it.
    func encoded(_ i: Int, changed: Bool = false) throws -> [UInt8] {
        switch workload {
        case .random: try ValueSerializer<String>.json.encode(strings[i] + (changed ? "!" : ""))
        case .family: try ValueSerializer<HeartSample>.json.encode(sample(i, changed: changed))
        }
    }

    /// Each key of `range` followed by its value: what the wire is compared with.
    func rawKeysAndValues(_ range: Range<Int>, changed: Bool = false) throws -> [UInt8] {
        var raw: [UInt8] = []
        for i in range {
            raw += key(i).utf8
            raw += try encoded(i, changed: changed)
        }
        return raw
    }
}

extension BenchFigure {
    /// The same figure with `tag` after its name.
    func tagged(_ tag: String) -> BenchFigure {
        tag.isEmpty ? self : BenchFigure(name: name + tag, value: value, unit: unit, baseline: baseline, baselineName: baselineName,
                                         ratio: ratio, target: target)
    }
}

import Foundation
@_spi(Testing) @_spi(Benchmarks) import SyncEngine

/// A write that comes in while the background checkpointer cuts a grown WAL
/// file back (the idle trim), against the machine's own cost of cutting the
/// same bytes at once (one `ftruncate` of a synced file of that size, the
/// least a cut under one hold of the writer's lock makes a write wait).
/// Each round grows the WAL with one large transaction, lets the trim find
/// the store idle, starts its cut on a thread of its own, and makes one
/// write a little later (spread over the rounds from 0 to 4 ms). The cut
/// starts the WAL over, so that write also syncs the WAL's new header, as
/// the first commit after any start over does (`a write that starts the WAL
/// over`, measured in the same rounds).
struct WALTrimBenchmark: Sendable {
    var rows: Int
    var rounds: Int

    init(quick: Bool) {
        rows = quick ? 20_000 : 200_000
        rounds = quick ? 2 : 12
    }

    func run(progress: (String) -> Void = { _ in }) throws -> [BenchFigure] {
        let folder = try BenchClock.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let family = KeyFamily<String>("bench", default: "", availability: .all, policy: .automaticSmall)
        let single = Key<Int>("bench-single", default: 0)
        var options = StoreOptions()
        options.walTrimIdleDelay = .seconds(3_600)  // the trim's looks are taken here, by hand
        let path = folder + "/store.sqlite"
        let store = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([family, single]), options: options)
        defer { store.close() }
        progress("a write during the idle WAL cut, \(rounds) rounds of \(rows) rows")
        var writes: [Double] = []
        var restarts: [Double] = []
        var walBytes: [Int] = []
        for round in 0..<rounds {
            let value = Array("round-\(round)-".utf8) + Array(repeating: UInt8(ascii: "x"), count: 40)
            _ = try store.commit((0..<rows).map { BackendWrite(key: family["k\($0)"].name, bytes: value) })
            store.waitForBackgroundCheckpoints()
            // The checkpoint copied it all: this commit starts the WAL over (and syncs its new header).
            restarts.append(try BenchClock.seconds { try store.setNow(round, for: single) })
            walBytes.append(Self.fileSize(path + "-wal"))
            guard !store.trimWALIfIdleNow() else { throw BenchError("the trim found the store idle right after a commit") }
            let cutEnded = DispatchSemaphore(value: 0)
            Thread {
                _ = store.trimWALIfIdleNow()
                cutEnded.signal()
            }.start()
            usleep(UInt32(4_000 * round / max(1, rounds - 1)))
            writes.append(try BenchClock.seconds { try store.setNow(1_000 + round, for: single) })
            // The cut stops at the write's commit (the store is no longer idle) after its step.
            cutEnded.wait()
        }
        writes.sort()
        restarts.sort()
        let medianWAL = walBytes.sorted()[walBytes.count / 2]
        progress("cutting \(medianWAL) bytes at once, \(rounds) times")
        var cuts: [Double] = []
        for _ in 0..<rounds { cuts.append(try Self.truncateAtOnce(path: folder + "/raw-cut", bytes: medianWAL)) }
        cuts.sort()
        let cutMedian = cuts[cuts.count / 2] * 1e3
        let slowest = writes.last! * 1e3
        return [
            BenchFigure(name: "raw cut of a grown WAL's bytes at once (ftruncate, median of \(rounds))", value: cutMedian, unit: "ms"),
            BenchFigure(name: "a write that starts the WAL over (no cut), median of \(rounds)", value: restarts[restarts.count / 2] * 1e3, unit: "ms"),
            BenchFigure(name: "a write during the idle WAL cut, median of \(rounds)", value: writes[writes.count / 2] * 1e3, unit: "ms"),
            BenchFigure(name: "a write during the idle WAL cut, slowest of \(rounds)", value: slowest, unit: "ms",
                        baseline: cutMedian, baselineName: "raw cut at once", ratio: cutMedian / slowest),
        ]
    }

    private static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    /// Seconds one `ftruncate` to nothing takes on a synced file of `bytes`.
    private static func truncateAtOnce(path: String, bytes: Int) throws -> Double {
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw BenchError("cannot create \(path)") }
        defer { close(fd); unlink(path) }
        let chunk = [UInt8](repeating: 7, count: 1 << 20)
        var written = 0
        while written < bytes {
            let count = min(chunk.count, bytes - written)
            guard pwrite(fd, chunk, count, off_t(written)) == count else { throw BenchError("cannot write \(path)") }
            written += count
        }
        guard fdatasync(fd) == 0 else { throw BenchError("cannot sync \(path)") }
        return try BenchClock.seconds {
            guard ftruncate(fd, 0) == 0 else { throw BenchError("cannot truncate \(path)") }
        }
    }
}

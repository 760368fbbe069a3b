import Foundation
@_spi(Testing) import SyncEngine

/// At most `width` simulation runs at once in one process; the others wait
/// for a slot, first come first served. A test suite that runs every fixture
/// as a parameterized test (Swift Testing starts them all at once) would
/// otherwise hold every scenario's stores and sockets open together: over a
/// hundred runs and 2,600 file descriptors, past a `ulimit -n` of 1,024 and
/// into `EMFILE` failures of unrelated tests. A run in virtual time gives the
/// same report whenever it starts.
final class RunSlots: Sendable {
    /// The engine's counting semaphore, first come first served.
    private let gate: ReadAheadGate
    /// How many runs may hold a slot at once.
    let width: Int

    init(width: Int) {
        self.width = max(1, width)
        gate = ReadAheadGate(credits: self.width)
    }

    /// Runs on a simulated link (CPU-bound) and over TCP (bound by real time
    /// and sockets) each get their own slots: twice the cores, 4 to 16.
    static let simulated = RunSlots(width: defaultWidth)
    static let overTCP = RunSlots(width: defaultWidth)
    static var defaultWidth: Int { min(16, max(4, 2 * ProcessInfo.processInfo.activeProcessorCount)) }

    /// How many runs wait for a slot now.
    var waitingCount: Int { gate.waitingCount }

    /// Runs `body` while holding a slot.
    func withSlot<T>(_ body: () async throws -> T) async rethrows -> T {
        await gate.acquire()
        defer { gate.release() }
        return try await body()
    }
}

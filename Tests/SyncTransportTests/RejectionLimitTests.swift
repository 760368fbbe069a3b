import Foundation
import Synchronization
import TestSupport
import Testing
@testable import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// A flood of strangers costs a bounded number of log lines and rejection
/// events; the suppressed ones are counted, not lost.
@Suite(.timeLimit(.minutes(5))) struct RejectionLimitTests {
    let secret = PairingSecret.generate()

    /// `count` blocking raw connections that each send garbage and wait for
    /// the listener to close them, one after the other, on a thread of their own.
    static func flood(port: Int, count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread {
                let garbage = Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
                for _ in 0..<count {
                    guard let fd = TCPListenerCloseTests.rawConnect(port: port) else { continue }
                    _ = garbage.withUnsafeBytes { send(fd, $0.baseAddress, garbage.count, PortablePOSIX.noSignalFlags) }
                    shutdown(fd, Int32(SHUT_WR))
                    var buffer = [UInt8](repeating: 0, count: 512)
                    while read(fd, &buffer, buffer.count) > 0 {}
                    close(fd)
                }
                continuation.resume()
            }.start()
        }
    }

    /// With the default limit (10 at once, then one a second), 500 rejected
    /// connections make a bounded number of warnings and `rejections`.
    @Test func floodOfStrangersIsLoggedWithinBounds() async throws {
        let logs = LogCapture()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs))
        let reader = Task {
            var count = 0
            for await _ in listener.rejections { count += 1 }
            return count
        }
        let start = ContinuousClock.now
        await Self.flood(port: listener.port, count: 500)
        await listener.close()
        let seconds = Int((ContinuousClock.now - start) / .seconds(1))
        let bound = 10 + seconds + 2
        let warnings = logs.all.filter { $0.hasPrefix("warning") && $0.contains("rejected the peer") }
        print("flood of 500 strangers: \(warnings.count) warnings in \(seconds) s")
        #expect(warnings.count <= bound, "\(warnings.count) warnings for 500 strangers in \(seconds) s")
        #expect(await reader.value <= bound)
        #expect(warnings.contains { $0.contains("suppressed") }, "the count of the others is logged")
    }

    /// Every rejection is accounted for: each report stands for itself and
    /// `suppressed` others; the logs carry the same counts.
    @Test func suppressedRejectionsAreCountedInTheReports() async throws {
        let logs = LogCapture()
        let limit = RateLimit(burst: 5, interval: .milliseconds(500))
        let listener = try await TCPListener.bind(
            host: "127.0.0.1", port: 0, configuration: testConfiguration(secret, logs: logs) { $0.rejectionReportLimit = limit })
        let strangers = 500
        let start = ContinuousClock.now
        let flood = Task { await Self.flood(port: listener.port, count: strangers) }
        var reports: [TCPListener.Rejection] = []
        var accounted = 0
        for await report in listener.rejectionReports {
            reports.append(report)
            accounted += 1 + report.suppressed
            if accounted >= strangers { break }
        }
        await flood.value
        let elapsed = ContinuousClock.now - start
        await listener.close()
        #expect(accounted == strangers)
        #expect(reports.allSatisfy { $0.reason.code == .badMagic })
        #expect(reports.prefix(5).allSatisfy { $0.suppressed == 0 }, "the burst is reported one by one")
        #expect(reports.contains { $0.suppressed > 0 })
        let bound = 5 + Int(elapsed / limit.interval) + 2
        #expect(reports.count <= bound, "\(reports.count) reports in \(elapsed)")
        let warnings = logs.all.filter { $0.contains("rejected the peer") }
        #expect(warnings.count == reports.count)
    }

    @Test func tokenBucketAllowsABurstThenOnePerInterval() {
        let start = ContinuousClock.now
        var bucket = TokenBucket(limit: RateLimit(burst: 3, interval: .seconds(1)), now: start)
        #expect((0..<5).map { _ in bucket.take(now: start) } == [true, true, true, false, false])
        let next = bucket.nextToken(now: start)
        #expect(next == start + .seconds(1))
        let refilled = bucket.take(now: start + .seconds(1))
        let again = bucket.take(now: start + .seconds(1))
        #expect(refilled && !again)
        // Tokens refill up to the burst, no further.
        let later = start + .seconds(60)
        #expect((0..<4).map { _ in bucket.take(now: later) } == [true, true, true, false])
    }

    /// A stranger whose garbage was refused and whose socket was closed
    /// before the accept loop took it is still reported with its address:
    /// it was "tcp:unknown" (the address is gone once the socket closed), in
    /// most reports of a node under a flood.
    @Test func aStrangerClosedBeforeItsTurnIsReportedWithItsAddress() async throws {
        let listener = try await TCPListener(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        // Not running yet: the socket is accepted and its garbage refused (the
        // socket closed) before the accept loop takes it.
        await Self.flood(port: listener.port, count: 3)
        let running = Task { try await listener.run() }
        let reports = try await withDeadline("the three rejections") {
            var reports: [TCPListener.Rejection] = []
            for await report in listener.rejectionReports {
                reports.append(report)
                if reports.count == 3 { break }
            }
            return reports
        }
        await listener.close()
        _ = await running.result
        #expect(reports.map(\.suppressed) == [0, 0, 0])
        for report in reports {
            #expect(report.peer?.hasPrefix("tcp:127.0.0.1:") == true, "\(report)")
        }
    }
}

import Foundation
import SyncTransport

/// The transport's own share of write→visible: a small frame sent over an
/// authenticated `TCPConnection`, echoed by the peer's consumer and received
/// back, against one raw loopback round trip of one byte measured in the
/// same run. Both ends run in this process, as in `bench sync`. Each way, a
/// frame wakes three threads (the sender's task → its event loop, the socket
/// → the peer's event loop, that loop → the consumer's task) where a raw
/// round trip wakes one.
public struct FrameRoundTripBenchmark: Sendable {
    public var samples: Int

    public init(quick: Bool) {
        samples = quick ? 200 : 4_000
    }

    public func run(progress: (String) -> Void = { _ in }) async throws -> [BenchFigure] {
        progress("raw loopback round trip")
        let raw = try LoopbackBaseline.measure(bytes: 1 << 20, roundTrips: samples).roundTripMicroseconds
        progress("\(samples) frame round trips over TCP")
        let trips = try await roundTrips()
        let p50 = trips[trips.count / 2], p99 = trips[min(trips.count - 1, trips.count * 99 / 100)]
        let figures = [
            BenchFigure(name: "raw loopback round trip p50 (beside the frame round trip)", value: raw, unit: "µs"),
            BenchFigure(name: "frame round trip p50 (TCP, authenticated, echoed by the peer's consumer)", value: p50, unit: "µs",
                        baseline: raw, baselineName: "raw RTT µs", ratio: p50 / raw),
            BenchFigure(name: "frame round trip p99 (TCP, authenticated, echoed by the peer's consumer)", value: p99, unit: "µs",
                        baseline: raw, baselineName: "raw RTT µs", ratio: p99 / raw),
        ]
        return figures
    }

    /// `samples` round trips of a 64-byte frame, sorted, in µs.
    private func roundTrips() async throws -> [Double] {
        let secret = PairingSecret.generate()
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: secret))
        let dialer: any FrameConnection
        do {
            dialer = try await TCPTransport.connect(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: secret))
        } catch {
            await listener.close()
            throw error
        }
        var accepted: (any FrameConnection)?
        for await connection in listener.connections {
            accepted = connection
            break
        }
        guard let echo = accepted else {
            await dialer.close()
            await listener.close()
            throw BenchError("the listener accepted no connection")
        }
        let echoTask = Task {
            for try await frame in echo.inbound { try await echo.send(frame) }
        }
        func measure() async throws -> [Double] {
            let frame = Frame(type: 1, payload: [UInt8](repeating: 0x42, count: 64))
            var iterator = dialer.inbound.makeAsyncIterator()
            var trips: [Double] = []
            trips.reserveCapacity(self.samples)
            for index in 0..<(self.samples + 100) {
                let start = ContinuousClock.now
                try await dialer.send(frame)
                guard try await iterator.next() != nil else { throw BenchError("the echo closed the connection") }
                // The first 100 warm up (lazy set-up, first allocations).
                if index >= 100 { trips.append(BenchClock.seconds(since: start) * 1e6) }
            }
            return trips.sorted()
        }
        let measured: Result<[Double], any Error>
        do { measured = .success(try await measure()) } catch { measured = .failure(error) }
        // Closed whether the round trips succeeded or not.
        await dialer.close()
        await echo.close()
        await listener.close()
        echoTask.cancel()
        _ = await echoTask.result
        return try measured.get()
    }
}

import Foundation
@_spi(Benchmarks) import SyncEngine
import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// The machine's raw loopback limits with plain POSIX sockets: throughput of
/// one TCP stream and the round trip of one byte; and the floor under
/// write→visible: a raw SQLite commit, a round trip, a raw commit on the other side.
enum LoopbackBaseline {
    struct Figures {
        var megabytesPerSecond: Double
        var roundTripMicroseconds: Double
    }

    static func measure(bytes total: Int, roundTrips: Int) throws -> Figures {
        let (listener, port) = try listeningSocket()
        defer { close(listener) }
        let server = Thread {
            let peer = accept(listener, nil, nil)
            guard peer >= 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var received = 0
            while received < total {
                let n = read(peer, &buffer, buffer.count)
                if n <= 0 { break }
                received += n
            }
            _ = write(peer, buffer, 1)
            var one: UInt8 = 0
            for _ in 0..<roundTrips {
                guard read(peer, &one, 1) == 1 else { break }
                _ = write(peer, &one, 1)
            }
            close(peer)
        }
        server.start()
        let client = try connectedSocket(port: port)
        defer { close(client) }
        let chunk = [UInt8](repeating: 0x5A, count: 65_536)
        var one: UInt8 = 1
        let seconds = BenchClock.seconds {
            var sent = 0
            while sent < total {
                let n = write(client, chunk, min(chunk.count, total - sent))
                if n <= 0 { break }
                sent += n
            }
            _ = read(client, &one, 1)
        }
        var trips: [Double] = []
        for _ in 0..<roundTrips {
            trips.append(BenchClock.seconds {
                _ = write(client, &one, 1)
                _ = read(client, &one, 1)
            })
        }
        trips.sort()
        return Figures(megabytesPerSecond: Double(total) / seconds / 1e6, roundTripMicroseconds: trips[trips.count / 2] * 1e6)
    }

    /// The least a write→visible sample can take on this machine, `samples`
    /// times, sorted, in µs: a raw SQLite commit of `value` (the store's
    /// pragmas, `RawCommitBaseline`) into a file in `folder`, one byte to a
    /// thread over loopback TCP, its raw commit of the same value into a file
    /// of its own, and one byte back. No JSON, no HLC, no batch, no session.
    static func writeToVisibleFloor(folder: String, samples: Int, value: [UInt8]) throws -> [Double] {
        let (listener, port) = try listeningSocket()
        defer { close(listener) }
        let watchPath = folder + "/floor-watch.sqlite"
        let server = Thread {
            let peer = accept(listener, nil, nil)
            guard peer >= 0 else { return }
            defer { close(peer) }
            guard let watch = try? RawCommitBaseline(path: watchPath) else { return }
            var one: UInt8 = 0
            for _ in 0..<samples {
                guard read(peer, &one, 1) == 1, (try? watch.commit(value, key: "floor")) != nil,
                      write(peer, &one, 1) == 1 else { return }
            }
        }
        server.start()
        let client = try connectedSocket(port: port)
        defer { close(client) }
        let phone = try RawCommitBaseline(path: folder + "/floor-phone.sqlite")
        var latencies: [Double] = []
        latencies.reserveCapacity(samples)
        var one: UInt8 = 1
        for _ in 0..<samples {
            let start = ContinuousClock.now
            try phone.commit(value, key: "floor")
            guard write(client, &one, 1) == 1, read(client, &one, 1) == 1 else {
                throw BenchError("the write→visible floor's peer thread stopped (its raw commit failed)")
            }
            latencies.append(BenchClock.seconds(since: start) * 1e6)
        }
        return latencies.sorted()
    }

    /// A listening socket on 127.0.0.1 and its port (network byte order).
    private static func listeningSocket() throws -> (Int32, in_port_t) {
        let listener = PortablePOSIX.streamSocket()
        guard listener >= 0 else { throw BenchError("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw BenchError("bind/listen failed")
        }
        return (listener, address.sin_port)
    }

    /// A client socket connected to 127.0.0.1:`port`, `TCP_NODELAY` set.
    private static func connectedSocket(port: in_port_t) throws -> Int32 {
        let client = PortablePOSIX.streamSocket()
        guard client >= 0 else { throw BenchError("socket() failed") }
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_addr.s_addr = inet_addr("127.0.0.1")
        target.sin_port = port
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(client)
            throw BenchError("connect failed")
        }
        var noDelay: Int32 = 1
        setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        return client
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

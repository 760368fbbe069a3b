import Foundation
import SyncTransport
#if canImport(Glibc)
import Glibc
#endif

/// The machine's raw loopback limits with plain POSIX sockets: throughput of
/// one TCP stream and the round trip of one byte.
enum LoopbackBaseline {
    struct Figures {
        var megabytesPerSecond: Double
        var roundTripMicroseconds: Double
    }

    static func measure(bytes total: Int, roundTrips: Int) throws -> Figures {
        let listener = PortablePOSIX.streamSocket()
        guard listener >= 0 else { throw BenchError("socket() failed") }
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                guard bind(listener, $0, length) == 0, listen(listener, 1) == 0, getsockname(listener, $0, &length) == 0 else {
                    throw BenchError("bind/listen failed")
                }
            }
        }
        let port = address.sin_port
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
        let client = PortablePOSIX.streamSocket()
        defer { close(client) }
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_addr.s_addr = inet_addr("127.0.0.1")
        target.sin_port = port
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw BenchError("connect failed") }
        var noDelay: Int32 = 1
        setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
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
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

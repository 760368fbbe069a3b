import Synchronization
import Testing
@testable import SyncTransport

/// Frames of every size, from concurrent senders, leave a `TCPConnection`
/// whole and in each sender's order; `close` delivers what was sent first.
@Suite(.timeLimit(.minutes(5))) struct TCPSendOrderTests {
    let secret = PairingSecret.generate()

    @Test func concurrentSendersOfMixedSizesArriveWholeAndInOrder() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sender = try await TCPTransport.connectTCP(
            host: "127.0.0.1", port: listener.port,
            configuration: testConfiguration(secret) { $0.maxPendingOutboundBytes = 64 << 10 })
        let receiver = try await first(of: listener.connections, "the receiving connection")
        let perSender = 400
        // Small frames, incompressible 20 KB ones and compressible 9 KB ones, interleaved.
        func payload(sender: UInt8, index: Int) -> [UInt8] {
            var writer = ByteWriter()
            writer.writeUInt8(sender)
            writer.writeUInt32(UInt32(index))
            switch index % 4 {
            case 0: return writer.bytes + randomBytes(20_000, seed: UInt64(index))
            case 1: return writer.bytes + Array(repeating: sender, count: 9_000)
            default: return writer.bytes + [UInt8(index & 0xFF)]
            }
        }
        let senders = (0..<2).map { id in
            Task {
                for index in 0..<perSender { try await sender.send(Frame(type: 1, payload: payload(sender: UInt8(id), index: index))) }
            }
        }
        let frames = try await receive(2 * perSender, from: receiver, within: .seconds(120))
        for task in senders { try await task.value }
        #expect(frames.count == 2 * perSender)
        var next = [0, 0]
        for frame in frames {
            var reader = ByteReader(frame.payload)
            let id = Int(try reader.readUInt8())
            let index = Int(try reader.readUInt32())
            #expect(index == next[id], "sender \(id)'s frames arrive in the order it sent them")
            #expect(frame.payload == payload(sender: UInt8(id), index: index))
            next[id] = index + 1
        }
        #expect(next == [perSender, perSender])
        await sender.close()
        await listener.close()
    }

    @Test func closeDeliversEverythingSentBeforeIt() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sender = try await TCPTransport.connectTCP(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let receiver = try await first(of: listener.connections, "the receiving connection")
        for index in 0..<30 {
            let size = index % 3 == 0 ? 50_000 : 8
            try await sender.send(Frame(type: 2, payload: Array(repeating: UInt8(index), count: size)))
        }
        await sender.close()
        await #expect(throws: TransportError.self) { try await sender.send(Frame(type: 2, payload: [1])) }
        let end = try await inboundEnd(of: receiver)
        #expect(end.error == nil)
        #expect(end.frames.map { $0.payload.first } == (0..<30).map { UInt8($0) })
        #expect(end.frames.map(\.payload.count) == (0..<30).map { $0 % 3 == 0 ? 50_000 : 8 })
        await listener.close()
    }

    @Test func framesQueuedTogetherShareOneSocketWrite() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: testConfiguration(secret))
        let sender = try await TCPTransport.connectTCP(
            host: "127.0.0.1", port: listener.port, configuration: testConfiguration(secret))
        let receiver = try await first(of: listener.connections, "the receiving connection")
        // Pushed far faster than a write reaches the socket (each is a hand-off to the event loop):
        // the writer finds most of them queued behind the one it is writing.
        let count = 200
        for index in 0..<count {
            var writer = ByteWriter()
            writer.writeUInt32(UInt32(index))
            try await sender.send(Frame(type: 1, payload: writer.bytes))
        }
        let frames = try await receive(count, from: receiver)
        let indices = frames.map { frame -> UInt32? in
            var reader = ByteReader(frame.payload)
            return try? reader.readUInt32()
        }
        #expect(indices == (0..<count).map { UInt32($0) })
        let statistics = sender.statistics
        #expect(statistics.framesSent == count)
        #expect(statistics.socketWrites >= 1)
        #expect(statistics.socketWrites < count / 2, "\(statistics.socketWrites) socket writes for \(count) frames sent together")
        await sender.close()
        await listener.close()
    }
}

#if os(Linux)
import Foundation
import Glibc
import SyncTransport
import Testing

/// A listening node that runs out of file descriptors (strangers hold
/// connections open in their handshake until none is left) must accept again
/// once they are free: a listener that stopped for good would leave the
/// phone running, printing nothing, while no watch could ever connect.
/// NIO backs off accepting for a second on any I/O error of `accept` (here
/// EMFILE) and does not end the server channel; the listener reports each
/// such failure as a rejection (NIO says nothing). This checks the whole node.
@Suite struct NodeDescriptorExhaustionTests {
    @Test func aPhoneNodeOutOfDescriptorsAcceptsAgainOnceTheyAreFree() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(NodeMultiPairingTests.keys.utf8).write(to: URL(fileURLWithPath: keys))
        let secretFile = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secretFile)
        let phoneArguments = ["node", "--role", "phone", "--db", folder.file("phone.sqlite"), "--keys", keys,
                              "--secret-file", secretFile, "--listen", "127.0.0.1:0"]

        // How many descriptors a listening phone node holds here (event loops per core, SQLite's files, …).
        let probe = try NodeProcess(Array(phoneArguments.dropFirst()))
        defer { probe.stop() }
        try await probe.next("the first phone node to listen") { $0["event"] as? String == "listening" }
        let held = openDescriptors(of: probe.process.processIdentifier, below: 1024)
        probe.send("quit")
        #expect(try await exitStatus(of: probe.process, "the first phone node to quit") == 0)

        // The same node with room for 16 more: fewer than the handshakes it admits at once (64).
        let limit = held + 16
        let command = "ulimit -n \(limit) && exec '\(syncsimBinary())' " + phoneArguments.map { "'\($0)'" }.joined(separator: " ")
        let phone = try NodeProcess(["-c", command], executable: "/bin/sh")
        defer { phone.stop() }
        let listening = try await phone.next("the limited phone node to listen") { $0["event"] as? String == "listening" }
        let port = try #require(listening["port"] as? Int)

        // Strangers that connect and send nothing, more than the room left.
        var strangers: [Int32] = []
        defer { for socket in strangers { close(socket) } }
        for _ in 0..<40 { strangers.append(try connectedSocket(port: port)) }
        // Out of descriptors, the listener says so (a rejection), waits a second and tries again.
        let failure = try await phone.next("the phone node to report an accept that failed") {
            $0["event"] as? String == "rejected" && ($0["error"] as? String)?.contains("could not accept") == true
        }
        #expect((failure["error"] as? String)?.contains("too-many-connections") == true, "\(failure)")
        #expect(openDescriptors(of: phone.process.processIdentifier, below: limit) == limit)
        for socket in strangers { close(socket) }
        strangers = []

        // Its watch connects and syncs.
        let watch = try NodeProcess(["--role", "watch", "--db", folder.file("watch.sqlite"), "--keys", keys,
                                     "--secret-file", secretFile, "--connect", "127.0.0.1:\(port)"])
        defer { watch.stop() }
        try await expectSteps(77, from: phone, toReach: watch, "health:steps to reach the watch")
        try await quitBoth(phone: phone, watch: watch)
    }

    /// How many of `pid`'s descriptors are numbered below `limit` (those it may open are).
    private func openDescriptors(of pid: Int32, below limit: Int) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        return names.compactMap(Int.init).filter { $0 < limit }.count
    }

    /// A blocking TCP socket connected to 127.0.0.1:`port` (the kernel completes it from the backlog).
    private func connectedSocket(port: Int) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else {
            let code = errno
            close(socket)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        return socket
    }
}
#endif

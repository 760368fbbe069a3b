import Foundation
@testable import SyncSim
import SyncTransport
import Testing

/// `syncsim node` read stdin with `getline`, whose buffer grows with the
/// line: a writer that never sends a newline (`cat /dev/zero |`, a runaway
/// script) grew the node until memory ran out. A line past the limit (by
/// default the largest `put` the store could take, all in escapes) is read to
/// its newline without being kept and answered once; the node goes on.
@Suite struct NodeLongLineTests {
    @Test func aLinePastTheLimitIsAnsweredOnceAndSkipped() async throws {
        let setup = try await ListeningPhoneNode(keys: #"{"keys":[{"name":"a"}]}"#, extraArguments: ["--line-limit", "1024"])
        let phone = setup.phone
        defer { phone.stop() }
        phone.send("put a \"" + String(repeating: "x", count: 200_000) + "\"")
        let reply = try await phone.reply("the long put")
        #expect(reply["ok"] as? Bool == false && reply["code"] as? String == "invalid-command", "\(reply)")
        #expect((reply["error"] as? String)?.contains("more than 1024 bytes (200008 read to its end)") == true, "\(reply)")
        phone.send("put a 1")
        #expect(try await phone.reply("the next put")["ok"] as? Bool == true, "the node reads on after the long line")
        phone.send("get a")
        #expect(try await phone.reply("get")["value"] as? Int == 1)
    }

    /// The reader itself: lines across its 64 KiB reads, one past the limit,
    /// and a last line without its newline.
    @Test func theReaderSplitsLinesAndSkipsTheLongOnes() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let long = [UInt8](repeating: UInt8(ascii: "y"), count: 300_000)
        let wide = [UInt8](repeating: UInt8(ascii: "z"), count: 150_000)
        let text = Array("status\n".utf8) + long + [10] + wide + [10] + [0xFF, 0x41] + [10] + Array("\nlast".utf8)
        let (readEnd, writeEnd) = (descriptors[0], descriptors[1])
        let writer = Thread {
            text.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = write(writeEnd, bytes.baseAddress! + offset, bytes.count - offset)
                    guard written > 0 else { break }
                    offset += written
                }
            }
            close(writeEnd)
        }
        writer.start()
        var lines: [NodeConsole.InputLine] = []
        for await line in NodeConsole.inputLines(from: readEnd, limit: 200_000) { lines.append(line) }
        close(readEnd)
        #expect(lines == [.text("status"), .tooLong(byteCount: 300_000), .text(String(repeating: "z", count: 150_000)),
                          .notUTF8(byteCount: 2), .text(""), .text("last")])
    }
}

import CSQLite
import Foundation
import SyncEngine
import SyncSim
import Testing

/// The `syncsim` executable built beside the test bundle.
func syncsimBinary() -> String {
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = url.appendingPathComponent("syncsim").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        url = url.deletingLastPathComponent()
    }
    return FileManager.default.currentDirectoryPath + "/.build/debug/syncsim"
}

/// Reads lines from a pipe, as an async sequence of strings that ends when
/// every writer closed it (a last line without a newline included).
///
/// A thread of its own blocks in `read(2)`: `FileHandle.readabilityHandler`
/// sometimes misses the end of the pipe on Linux
/// (swift-corelibs-foundation#3275), which left a waiting test hanging.
func lines(of pipe: Pipe) -> AsyncStream<String> {
    AsyncStream { continuation in
        // The thread holds the handle: the pipe's owner may let go of it first, and
        // the descriptor must not be closed (or its number reused) under the read.
        let handle = pipe.fileHandleForReading
        let buffer = LineBuffer()
        Thread.detachNewThread {
            withExtendedLifetime(handle) {
                let descriptor = handle.fileDescriptor
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                    if count < 0, errno == EINTR { continue }
                    guard count > 0 else { break }
                    for line in buffer.append(Data(chunk[..<count])) { continuation.yield(line) }
                }
            }
            if let last = buffer.remainder() { continuation.yield(last) }
            continuation.finish()
        }
    }
}

final class LineBuffer: Sendable {
    private let pending = Mutex<Data>(Data())
    func append(_ data: Data) -> [String] {
        pending.withLock { buffer in
            buffer.append(data)
            var lines: [String] = []
            while let newline = buffer.firstIndex(of: 0x0A) {
                lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                buffer.removeSubrange(buffer.startIndex...newline)
            }
            return lines
        }
    }
    /// What is left after the last newline, if anything.
    func remainder() -> String? {
        pending.withLock { $0.isEmpty ? nil : String(decoding: $0, as: UTF8.self) }
    }
}
import Synchronization

@Suite struct CrashTests {
    @Test func sigkillMidBatchLosesNoReturnedWrite() async throws {
        let folder = TempFolder()
        let db = folder.file("crash.sqlite")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: syncsimBinary())
        process.arguments = ["write-loop", "--db", db, "--batch", "50"]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let written = lines(of: out)
        let lastAcknowledged = try await withDeadline("the writer to acknowledge 5,000 writes") {
            var last = -1
            for await line in written {
                last = Int(line) ?? last
                if last >= 5_000 { break }
            }
            return last
        }
        kill(process.processIdentifier, SIGKILL)
        try await exitStatus(of: process, "the killed writer to be reaped")
        #expect(process.terminationReason == .uncaughtSignal)
        #expect(lastAcknowledged >= 5_000)

        var handle: OpaquePointer?
        try #require(sqlite3_open(db, &handle) == SQLITE_OK)
        var stmt: OpaquePointer?
        try #require(sqlite3_prepare_v2(handle, "PRAGMA integrity_check", -1, &stmt, nil) == SQLITE_OK)
        try #require(sqlite3_step(stmt) == SQLITE_ROW)
        #expect(sqlite3_column_text(stmt, 0).map { String(cString: $0) } == "ok")
        sqlite3_finalize(stmt)
        sqlite3_close(handle)

        let store = try SyncStore(path: db, role: .phone, registry: try KeyRegistry([WriteLoopCommand.family]))
        for i in 0...lastAcknowledged {
            #expect(try store.value(for: WriteLoopCommand.family["k\(i)"]) == i, "write \(i) was acknowledged but is missing")
        }
        let count = try store.allEntryInfo().count
        #expect(count >= lastAcknowledged + 1)
        #expect(count % 50 == 0)  // batches are all-or-nothing
    }
}

import Foundation
import Synchronization
import Testing
@testable import SyncTransport

/// Expects `body` to throw a `TransportError` with `code`; returns it.
@discardableResult
func expectCode(
    _ code: TransportError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> TransportError? {
    do {
        try body()
        Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as TransportError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected TransportError \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Async variant of `expectCode`.
@discardableResult
func expectCode(
    _ code: TransportError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> TransportError? {
    do {
        try await body()
        Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as TransportError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected TransportError \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Whether `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
    let first = needle[0]
    var index = 0
    while index <= haystack.count - needle.count {
        if haystack[index] == first, Array(haystack[index..<index + needle.count]) == needle { return true }
        index += 1
    }
    return false
}

/// Deterministic pseudo-random bytes (incompressible).
func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count + 8)
    while bytes.count < count {
        withUnsafeBytes(of: random.next()) { bytes.append(contentsOf: $0) }
    }
    return Array(bytes.prefix(count))
}

/// Records raw wire bytes per direction, and reports each chunk on a stream.
final class WireRecorder: Sendable {
    private let storage = Mutex<[WireDirection: [UInt8]]>([:])
    let chunks: AsyncStream<(WireDirection, Int)>
    private let sink: AsyncStream<(WireDirection, Int)>.Continuation

    init() {
        (chunks, sink) = AsyncStream.makeStream(of: (WireDirection, Int).self)
    }

    var tap: @Sendable (WireDirection, [UInt8]) -> Void {
        { [self] direction, bytes in
            self.storage.withLock { $0[direction, default: []] += bytes }
            self.sink.yield((direction, bytes.count))
        }
    }

    func bytes(_ direction: WireDirection) -> [UInt8] {
        storage.withLock { $0[direction] ?? [] }
    }

    var all: [UInt8] { bytes(.inbound) + bytes(.outbound) }
}

/// The path of a fixture folder in the package.
func fixturesPath(_ relative: String) -> String {
    URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures").appendingPathComponent(relative).path
}

/// A fresh temporary directory.
func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "synctransport-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

import CSQLite
import Foundation
import Logging
@testable import SyncEngine
import Testing

/// A value that cannot be read is passed over with a log line and an error
/// event naming its key. A key name may be a peer's (a family member), so it
/// is escaped there as in every other log line: a newline in it forged a line.
@Suite struct UnsentKeyLogEscapingTests {
    static let vault = KeyFamily<String>("vault", default: "", security: .encrypted)

    @Test func aDamagedValuesKeyIsEscapedInTheLogAndTheEvent() async throws {
        let (lines, sink) = AsyncStream.makeStream(of: String.self)
        var pair = try Pair(keys: [Self.vault, TestKeys.steps])
        let forged = "a\nerror forged line"
        try pair.phone.setNow("sealed", for: Self.vault[forged])
        pair.phone.close()
        let phonePath = pair.folder.file("phone.sqlite")
        try rawSQL(phonePath, "UPDATE entries SET value = zeroblob(40) WHERE key LIKE 'vault:%'")
        var options = StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key")))
        options.logger = Logger(label: "test") { _ in StreamLogHandler(sink: sink, includesMetadata: true) }
        pair.phone = try SyncStore(path: phonePath, role: .phone, registry: try KeyRegistry([Self.vault, TestKeys.steps]), options: options)
        let events = pair.phone.events()
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        sink.finish()
        var logged: [String] = []
        for await line in lines { logged.append(line) }
        let unsent = try #require(logged.first { $0.contains("cannot be read is not sent") }, "\(logged)")
        #expect(!unsent.contains("\n"), "\(unsent)")
        #expect(unsent.contains("a\\nerror forged line"), "\(unsent)")
        let error = try await first(of: events, "the error event of the unsent value") {
            if case .error(let error) = $0, error.message.contains("is not sent") { true } else { false }
        }
        #expect(!"\(error)".contains("\n"), "\(error)")
    }
}

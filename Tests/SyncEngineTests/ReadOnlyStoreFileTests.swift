import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// Makes `path` unwritable: `chattr +i` for root (who ignores permissions), else mode 0o444/0o555; false when it cannot.
private func makeUnwritable(_ path: String, _ on: Bool, folder: Bool) -> Bool {
    if geteuid() == 0 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [on ? "+i" : "-i", path]
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
    return chmod(path, on ? (folder ? 0o555 : 0o444) : (folder ? 0o755 : 0o644)) == 0
}

/// A store file the app cannot write, or in a folder where SQLite cannot make
/// its log (`-wal`, `-shm`): the open failed with SQLite's bare "attempt to
/// write a readonly database" or "unable to open database file", naming
/// neither the file nor what to do. Now the error names the store and says
/// to make the file and its folder writable.
@Suite(.timeLimit(.minutes(5)), .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr") || geteuid() != 0))
struct ReadOnlyStoreFileTests {
    @Test(arguments: [false, true])
    func anUnwritableStoreOrFolderGetsAnErrorThatSaysSo(folderReadOnly: Bool) async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        try await closedStoreWithOneValue(at: path, options: options)
        let target = folderReadOnly ? folder.path : path
        try #require(makeUnwritable(target, true, folder: folderReadOnly))
        defer { _ = makeUnwritable(target, false, folder: folderReadOnly) }
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .database && error.message.contains(path) && error.message.contains("writable")
        }
    }
}

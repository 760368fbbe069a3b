import Foundation
@testable import SyncSim
import Testing

/// A run whose store folder cannot be made (`SYNCSIM_TMPDIR` naming a file,
/// say) failed with Foundation's dump, `Error Domain=NSCocoaErrorDomain
/// Code=512 "(null)"UserInfo={…}`. It says now what it could not make, where
/// the folder comes from, and the system's reason (still code 3).
@Suite struct SimTemporaryFolderTests {
    @Test func aStoreFolderThatCannotBeMadeIsNamedWithItsReason() async throws {
        let folder = TempFolder()
        let file = folder.file("not-a-folder")
        try Data().write(to: URL(fileURLWithPath: file))
        var options = RunOptions()
        options.temporaryDirectory = file
        let outcome = await Simulation.run(path: SimScenarioTests.fixtures + "/basic-two-way.json", options: options)
        #expect(outcome.exitCode == Simulation.Exit.runtimeFailure)
        let error = try #require(outcome.runError)
        #expect(error.contains("cannot create a folder for the run's stores in \(file)"), "\(error)")
        #expect(error.contains("SYNCSIM_TMPDIR") && error.hasSuffix(": Not a directory"), "\(error)")
        #expect(!error.contains("Error Domain"), "\(error)")
    }
}

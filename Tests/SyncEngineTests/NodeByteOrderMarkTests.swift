@testable import SyncSim
import Testing

/// A command file saved with a UTF-8 byte order mark (Notepad's "UTF-8 with
/// BOM"), `syncsim node … < commands.txt`, lost its first command: the node
/// answered "unknown command '\ufeffput a 1'". A scenario file with a BOM
/// runs; a node's command line now drops one too, as it drops a CRLF's CR.
@Suite struct NodeByteOrderMarkTests {
    @Test func aLeadingByteOrderMarkIsNotPartOfTheCommand() {
        #expect(NodeConsole.commandText("\u{FEFF}put a 1") == "put a 1")
        #expect(NodeConsole.commandText("\u{FEFF}status\r") == "status")
        #expect(NodeConsole.commandText("\u{FEFF}").isEmpty)
        // Only at the start: inside a value it is the value's.
        #expect(NodeConsole.commandText("put s \"\u{FEFF}x\"") == "put s \"\u{FEFF}x\"")
    }
}

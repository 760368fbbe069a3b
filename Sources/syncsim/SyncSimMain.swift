import ArgumentParser
import SyncSim

/// `syncsim`: a thin shell over the SyncSim library.
@main
struct SyncSimMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncsim",
        abstract: "Run paired phone/watch SyncEngine nodes: scenarios, fuzzing, a live node, benchmarks.",
        subcommands: SyncSimCommands.all)

    /// Usage errors print the usage; failures at run time print one line and exit with their documented code.
    static func main() async {
        await SyncSimCommands.main(SyncSimMain.self)
    }
}

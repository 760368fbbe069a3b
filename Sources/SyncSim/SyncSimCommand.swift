import ArgumentParser

/// The `syncsim` root command. Add a subcommand by appending its type to
/// `subcommands` below: this list is the one place that names them all.
public struct SyncSimCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "syncsim",
        abstract: "Run paired phone and watch nodes through scenarios and check that they converge.",
        subcommands: [
            RunCommand.self,
            FuzzCommand.self,
            PairCommand.self,
            InspectCommand.self,
            BenchCommand.self,
            WriteLoopCommand.self,
        ])

    public init() {}
}

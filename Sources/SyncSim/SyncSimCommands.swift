import ArgumentParser

/// The subcommands of `syncsim`, in one place: add a new one here.
public enum SyncSimCommands {
    public static let all: [any ParsableCommand.Type] = [
        RunCommand.self,
        FuzzCommand.self,
        NodeCommand.self,
        PairCommand.self,
        InspectCommand.self,
        BenchCommand.self,
        WriteLoopCommand.self,
    ]
}

import ArgumentParser

/// The subcommands of `syncsim`, in one place.
public enum SyncSimCommands {
    public static let all: [any ParsableCommand.Type] = [
        NodeCommand.self,
        BenchCommand.self,
        WriteLoopCommand.self,
    ]
}

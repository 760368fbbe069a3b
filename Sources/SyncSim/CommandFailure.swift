import ArgumentParser
import Foundation

/// A `syncsim` command that failed at run time: printed as one line on
/// stderr, without the usage, and the process exits with `exitCode`.
public struct CommandFailure: Error, Sendable, CustomStringConvertible {
    /// One of `Simulation.Exit`'s codes.
    public var exitCode: Int32
    public var message: String

    public init(exitCode: Int32, _ message: String) {
        self.exitCode = exitCode
        self.message = message
    }

    public var description: String { message }

    /// The operating system's words for why a file operation failed (Foundation's error wraps them).
    static func reason(_ error: any Error) -> String {
        let underlying = (error as? CocoaError)?.underlying ?? (error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error
        if let posix = underlying as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        if let posix = underlying.map({ $0 as NSError }), posix.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(posix.code))) }
        return (error as NSError).localizedDescription
    }
}

extension SyncSimCommands {
    /// How `syncsim` reports an error a command's `run()` threw: its exit code
    /// and one line for stderr. nil for what ArgumentParser reports itself:
    /// a usage error (`ValidationError`, with the usage), a help request, an
    /// `ExitCode` (the command printed its own output).
    public static func runtimeFailure(_ error: any Error, command: String) -> (exitCode: Int32, line: String)? {
        let exitCode: Int32
        switch error {
        case is ValidationError, is CleanExit, is ExitCode:
            return nil
        case let failure as CommandFailure:
            exitCode = failure.exitCode
        default:
            exitCode = Simulation.Exit.runtimeFailure
        }
        let message = "\(error)".split(whereSeparator: \.isNewline).joined(separator: " ")
        return (exitCode, "\(command): error: \(message)")
    }

    /// Parses the command line and runs the command. A usage error prints the
    /// message and the usage (exit 64), no subcommand the help (on stderr, exit
    /// 64); a failure at run time prints one line and exits with its
    /// documented code (`runtimeFailure(_:command:)`).
    public static func main<Root: ParsableCommand>(_ root: Root.Type, arguments: [String]? = nil) async -> Never {
        let parsed: any ParsableCommand
        do {
            parsed = try root.parseAsRoot(arguments)
        } catch {
            root.exit(withError: error)
        }
        var command = parsed
        let subcommand = ObjectIdentifier(type(of: parsed)) == ObjectIdentifier(root) ? nil : type(of: parsed).configuration.commandName
        if subcommand == nil, !root.configuration.subcommands.isEmpty, root.configuration.defaultSubcommand == nil {
            // No subcommand: a usage error, as an unknown one is (the root would print its help on stdout and exit 0).
            try? FileHandle.standardError.write(contentsOf: Data((root.helpMessage() + "\n").utf8))
            exit(Simulation.Exit.usage)
        }
        let name = [root.configuration.commandName ?? "syncsim", subcommand].compactMap { $0 }.joined(separator: " ")
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // ArgumentParser's own errors (a help request runs `help`, which throws one) are its to print.
            guard root.exitCode(for: error) == .failure, let failure = runtimeFailure(error, command: name) else {
                root.exit(withError: error)
            }
            try? FileHandle.standardError.write(contentsOf: Data((failure.line + "\n").utf8))
            exit(failure.exitCode)
        }
        root.exit()
    }
}

import Foundation
import SyncEngine
import SyncTransport

/// A scenario file that cannot be run: names the field and its line.
public struct ScenarioError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, as given.
    public var file: String
    /// The offending field, e.g. `timeline[3].node` (empty for a syntax error).
    public var field: String
    /// 1-based line in the file (0 when unknown).
    public var line: Int
    public var message: String

    public init(file: String, field: String, line: Int, message: String) {
        self.file = file
        self.field = field
        self.line = line
        self.message = message
    }

    public var description: String {
        let place = line > 0 ? "\(file):\(line)" : file
        return field.isEmpty ? "\(place): \(message)" : "\(place): field '\(field)': \(message)"
    }
}

extension Scenario {
    /// The largest scenario file read (a FIFO, a device or a larger file is refused at once).
    public static let fileLimit = 64 << 20

    /// Loads and validates a scenario file; a `keysFile` is resolved relative to it.
    public static func load(path: String) throws(ScenarioError) -> Scenario {
        let data: Data
        do {
            data = try InputFile.read(path, limit: Scenario.fileLimit, what: "the file")
        } catch {
            throw ScenarioError(file: path, field: "", line: 0, message: error.message)
        }
        return try decode(data, file: path)
    }

    /// Parses scenario text; `file` names it in errors and anchors `keysFile`.
    public static func parse(_ text: String, file: String = "scenario") throws(ScenarioError) -> Scenario {
        try decode(Data(text.utf8), file: file)
    }

    static func decode(_ data: Data, file: String) throws(ScenarioError) -> Scenario {
        let decoder = JSONDecoder()
        decoder.userInfo[ScenarioDocument.fileKey] = file
        return try ScenarioError.decoding(data, file: file) { try decoder.decode(ScenarioDocument.self, from: data).scenario }
    }

    /// The scenario as a scenario file (keys inline unless it came with a `keysFile`):
    /// pretty JSON with sorted members, for `syncsim fuzz`'s failure files.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self) + "\n"
    }
}

extension ScenarioError {
    /// Runs `body`, which decodes `data`, and turns what it throws into a
    /// `ScenarioError` of `file`: a syntax error (checked first, by Foundation's
    /// strict parser) names its line; a field error names the field, from its
    /// coding path, and the line `JSONLocator` finds for it.
    static func decoding<T>(_ data: Data, file: String, _ body: () throws -> T) throws(ScenarioError) -> T {
        if let syntax = JSONSyntaxError(validating: data) {
            throw ScenarioError(file: file, field: "", line: syntax.line, message: "not valid JSON: \(syntax.message)")
        }
        do {
            return try body()
        } catch let error as ScenarioError {
            throw error
        } catch let error as FieldError {
            throw ScenarioError(file: file, field: error.field, line: JSONLocator.line(of: error.codingPath, in: data), message: error.message)
        } catch let error as DecodingError {
            let (path, message): ([any CodingKey], String) = switch error {
            case .keyNotFound(let key, let context): (context.codingPath + [key], "is required")
            case .valueNotFound(_, let context): (context.codingPath, "must not be null")
            case .typeMismatch(_, let context), .dataCorrupted(let context): (context.codingPath, context.debugDescription)
            @unknown default: ([], "\(error)")
            }
            throw ScenarioError(file: file, field: FieldError.name(of: path), line: JSONLocator.line(of: path, in: data), message: message)
        } catch {
            throw ScenarioError(file: file, field: "", line: 0, message: error.message)
        }
    }
}

extension Error {
    /// The message of a `SyncError`, or a description.
    var message: String { (self as? SyncError)?.message ?? "\(self)" }
}

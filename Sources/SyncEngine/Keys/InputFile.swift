#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SyncTransport

/// A whole input file a person names (a key registry, a scenario), read
/// only when it is a regular file of at most `limit` bytes: a FIFO, a device
/// such as `/dev/zero` or a directory is refused at once, instead of waiting
/// for a writer or reading without end.
package enum InputFile {
    /// The largest key registry file read (`KeyRegistry.load(jsonFile:)`).
    package static let registryLimit = 16 << 20

    /// The bytes of `path`, or `.invalidConfiguration` saying why it cannot be
    /// read; `what` names the file in the message ("the key registry file x.json").
    package static func read(_ path: String, limit: Int, what: String) throws(SyncError) -> Data {
        do {
            return Data(try RegularFile.read(path, limit: limit))
        } catch {
            switch error {
            case .missing:
                throw SyncError(.invalidConfiguration, "cannot read \(what): \(String(cString: strerror(ENOENT)))")
            case .unreadable(let reason):
                throw SyncError(.invalidConfiguration, "cannot read \(what): \(reason)")
            case .notRegular(let kind):
                throw SyncError(.invalidConfiguration, "\(what) is not a regular file (\(kind)); give a JSON file")
            case .tooLarge(let size):
                throw SyncError(.invalidConfiguration, "\(what) has \(size.map(String.init) ?? "more than \(limit)") bytes, over the limit of \(limit) bytes")
            case .readableByOthers(let mode):
                throw SyncError(.invalidConfiguration, "cannot read \(what): its mode 0\(String(mode, radix: 8)) lets others read it")
            }
        }
    }
}

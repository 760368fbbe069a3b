#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

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
        // Non-blocking: opening a FIFO for reading would wait for a writer (the type is checked below).
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
                throw SyncError(.invalidConfiguration, "\(what) is not a regular file (\(kind(info.st_mode))); give a JSON file")
            }
            throw SyncError(.invalidConfiguration, "cannot read \(what): \(String(cString: strerror(code)))")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw SyncError(.invalidConfiguration, "cannot read \(what): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SyncError(.invalidConfiguration, "\(what) is not a regular file (\(kind(info.st_mode))); give a JSON file")
        }
        let tooLarge = { (size: String) in
            SyncError(.invalidConfiguration, "\(what) has \(size) bytes, over the limit of \(limit) bytes")
        }
        guard Int(clamping: info.st_size) <= limit else { throw tooLarge("\(info.st_size)") }
        var bytes = Data()
        bytes.reserveCapacity(Int(clamping: info.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { posixRead(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw SyncError(.invalidConfiguration, "cannot read \(what): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            // A file that grows while it is read stops at the limit too.
            if bytes.count > limit { throw tooLarge("more than \(limit)") }
        }
        return bytes
    }

    private static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFCHR, S_IFBLK: "a device"
        case S_IFSOCK: "a socket"
        default: "not a file"
        }
    }
}

/// The C `read`, out of reach of `InputFile.read(_:limit:what:)`'s name.
private func posixRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

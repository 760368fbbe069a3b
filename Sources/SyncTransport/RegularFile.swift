#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads a small file a person or the engine names (a pairing secret, a
/// master key, a key registry, a scenario) only when it is a regular file:
/// a FIFO, a device such as `/dev/zero`, a socket or a directory is refused
/// at once, instead of waiting for a writer or reading without end. Each
/// caller turns a `Failure` into its own error and words.
package enum RegularFile {
    /// Why a file was not read.
    package enum Failure: Error, Equatable {
        /// Nothing at the path (`ENOENT`).
        case missing
        /// The path could not be opened, inspected or read: `strerror` of the code.
        case unreadable(reason: String)
        /// The path is not a regular file: "a directory", "a FIFO", "a device", "a socket".
        case notRegular(kind: String)
        /// Group or others may access the file (only with `ownerOnly`); `mode` is `st_mode & 0o777`.
        case readableByOthers(mode: UInt32)
        /// Longer than the limit: `size` is its length in bytes, or nil when it
        /// grew past the limit while it was read.
        case tooLarge(size: Int64?)
    }

    /// The bytes of `path`, at most `limit` of them. With `ownerOnly`, a file
    /// that group or others may access is refused before it is read.
    package static func read(_ path: String, limit: Int, ownerOnly: Bool = false) throws(Failure) -> [UInt8] {
        // Non-blocking: opening a FIFO for reading would wait for a writer (the type is checked below).
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { throw .missing }
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG { throw .notRegular(kind: kind(of: info.st_mode)) }
            throw .unreadable(reason: describe(code))
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(reason: describe(errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .notRegular(kind: kind(of: info.st_mode)) }
        let mode = UInt32(info.st_mode & 0o777)
        if ownerOnly, mode & 0o077 != 0 { throw .readableByOthers(mode: mode) }
        guard Int64(info.st_size) <= Int64(limit) else { throw .tooLarge(size: Int64(info.st_size)) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(clamping: info.st_size))
        var chunk = [UInt8](repeating: 0, count: min(64 * 1024, limit + 1))
        while true {
            let count = chunk.withUnsafeMutableBytes { posixRead(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(reason: describe(errno))
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            // A file that grows while it is read stops at the limit too.
            if bytes.count > limit { throw .tooLarge(size: nil) }
        }
        return bytes
    }

    /// What a path that is not a regular file is, for messages.
    package static func kind(of mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFCHR, S_IFBLK: "a device"
        case S_IFSOCK: "a socket"
        default: "not a file"
        }
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

/// The C `read`, out of reach of `RegularFile.read(_:limit:ownerOnly:)`'s name.
private func posixRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writing a file's bytes whole, and telling a full device from other failures.
package enum FileWrite {
    /// Writes all of `bytes` to `descriptor`, going on after short and
    /// interrupted writes; returns the `errno` of a failure, or nil.
    package static func writeAll(_ bytes: [UInt8], to descriptor: Int32) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return errno
            }
            if written == 0 { return EIO }
            offset += written
        }
        return nil
    }

    /// Why `replace` failed: the `errno`, the file it concerns, and whether
    /// the temporary file could not even be created.
    package struct Failure: Error {
        package let code: Int32
        package let file: String
        package let creating: Bool
    }

    /// Puts `bytes` at `target` whole or not at all: written to `temporary`,
    /// synced, renamed over `target` (the temporary file removed on failure).
    /// The directory is not synced: the caller does, as it needs.
    package static func replace(_ target: String, with bytes: [UInt8], through temporary: String) throws(Failure) {
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure(code: errno, file: temporary, creating: true) }
        var failure = writeAll(bytes, to: descriptor)
        if failure == nil, fsync(descriptor) != 0 { failure = errno }
        close(descriptor)
        if failure == nil, rename(temporary, target) != 0 { failure = errno }
        if let failure {
            unlink(temporary)
            throw Failure(code: failure, file: target, creating: false)
        }
    }

    /// Syncs the folder holding `path`, so that a rename in it reaches stable
    /// storage. Returns the `errno` of a failed sync, or nil; a folder that
    /// cannot be opened for reading, or a file system that cannot sync one
    /// (`EINVAL`), is let be.
    @discardableResult
    package static func syncFolder(of path: String) -> Int32? {
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let descriptor = open(folder, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return fsync(descriptor) != 0 && errno != EINVAL ? errno : nil
    }

    /// Whether `code` (an `errno`) says the device's storage is full: no
    /// space left, or the user's quota used up.
    package static func isStorageFull(_ code: Int32) -> Bool {
        code == ENOSPC || code == EDQUOT
    }

    /// `errno`'s text.
    package static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

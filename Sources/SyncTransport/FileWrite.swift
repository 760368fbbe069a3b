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

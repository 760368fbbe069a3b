#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The few POSIX spellings that differ between Glibc and Darwin, for the
/// benchmarks' and tests' raw sockets and CPU clock.
package enum PortablePOSIX {
    /// A blocking IPv4 TCP socket that never raises SIGPIPE (Darwin: `SO_NOSIGPIPE`), or -1.
    package static func streamSocket() -> Int32 {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        #if canImport(Darwin)
        if fd >= 0 {
            var on: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
        }
        #endif
        return fd
    }

    /// `send` flags that keep a write to a reset connection from raising SIGPIPE.
    package static var noSignalFlags: Int32 {
        #if canImport(Darwin)
        0  // the socket itself has SO_NOSIGPIPE
        #else
        Int32(MSG_NOSIGNAL)
        #endif
    }

    /// `RUSAGE_SELF` as `getrusage` takes it.
    package static var resourceUsageOfSelf: Int32 {
        #if canImport(Glibc)
        RUSAGE_SELF.rawValue
        #else
        RUSAGE_SELF
        #endif
    }
}

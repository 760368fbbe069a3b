import CZlib
#if canImport(CLibdeflate)
import CLibdeflate
#endif

/// zlib-format compression (RFC 1950) with bounded inflation.
public enum Compression {
    /// How `deflate(_:settings:)` compresses: with zlib (a level, a strategy
    /// and, optionally, a shorter hash-chain search than the level's own) or
    /// with libdeflate (a level). Every one of them writes the zlib format and
    /// decodes with any inflater: they change only the sender's work.
    public struct Settings: Sendable, Equatable {
        /// The library that compresses.
        public enum Compressor: Sendable, Equatable {
            /// The system's zlib.
            case zlib
            /// libdeflate (whole buffers; levels 0–12), where this build has it
            /// (`Compression.hasLibdeflate`).
            case libdeflate
        }

        /// zlib's strategies that matter here.
        public enum Strategy: Int32, Sendable {
            /// zlib's default matching.
            case `default` = 0
            /// `Z_FILTERED`: matches of five bytes or fewer are sent as literals.
            case filtered = 1
        }

        /// Which library compresses (`.zlib` unless made with `libdeflate(level:)`).
        public var compressor: Compressor = .zlib
        /// 0 = store, 9 = smallest (12 with libdeflate), -1 = zlib's default (6).
        public var level: Int32
        /// Which matches are taken.
        public var strategy: Strategy
        /// Candidates searched per match (zlib's `max_chain`, through
        /// `deflateTune`, with level 5's good, lazy and nice lengths; levels
        /// 4–9 only); nil keeps the level's own (32 at level 5).
        public var maxChain: Int32?

        /// Settings of `level`, `strategy` and, when given, `maxChain` candidates per match.
        public init(level: Int32, strategy: Strategy = .default, maxChain: Int32? = nil) {
            self.level = level
            self.strategy = strategy
            self.maxChain = maxChain
        }

        /// libdeflate at `level` (0 = store, 12 = smallest); where this build
        /// has no libdeflate, `deflate(_:settings:)` throws for these settings.
        public static func libdeflate(level: Int32) -> Settings {
            var settings = Settings(level: level)
            settings.compressor = .libdeflate
            return settings
        }

        /// zlib's level 5, `Z_FILTERED`, 8 candidates per match: what frames
        /// were deflated with before libdeflate, and still are where this build
        /// has none. Measured on the benchmark's batches (`syncsim bench sync`,
        /// docs/PERFORMANCE.md): against plain level 5, the random workload's
        /// batches come out the same size in 0.63× the time (short matches in
        /// random digits cost more than the literals they replace, so dropping
        /// them pays for the shorter search), the family workload's 3 % larger
        /// in 0.81×.
        public static let zlibFrames = Settings(level: 5, strategy: .filtered, maxChain: 8)

        /// What frames are deflated with: libdeflate's level 5 where this build
        /// has it (Linux), else `zlibFrames`. On the benchmark's batches
        /// libdeflate's level 5 comes out about 4 % smaller than `zlibFrames`
        /// in about 0.8× its time (docs/PERFORMANCE.md).
        public static let frames = hasLibdeflate ? libdeflate(level: 5) : zlibFrames
    }

    /// Whether this build deflates with libdeflate (`Settings.libdeflate(level:)`).
    public static var hasLibdeflate: Bool {
        #if canImport(CLibdeflate)
        true
        #else
        false
        #endif
    }

    /// Compresses `bytes` in zlib format at `level` (0 = store, 9 = smallest,
    /// -1 = zlib's default).
    public static func deflate(_ bytes: [UInt8], level: Int32 = 6) throws -> [UInt8] {
        try deflate(bytes, settings: Settings(level: level))
    }

    /// Compresses `bytes` in zlib format with `settings`.
    public static func deflate(_ bytes: [UInt8], settings: Settings) throws -> [UInt8] {
        switch settings.compressor {
        case .zlib: try zlibDeflate(bytes, settings: settings)
        case .libdeflate: try libdeflateDeflate(bytes, level: settings.level)
        }
    }

    private static func libdeflateDeflate(_ bytes: [UInt8], level: Int32) throws -> [UInt8] {
        guard (0...12).contains(level) else {
            throw TransportError(.protocolViolation, "libdeflate's compression level \(level) is not in 0...12")
        }
        #if canImport(CLibdeflate)
        guard let compressor = libdeflate_alloc_compressor(level) else {
            throw TransportError(.decompressionFailed, "libdeflate could not start compressing (out of memory)")
        }
        defer { libdeflate_free_compressor(compressor) }
        let bound = libdeflate_zlib_compress_bound(compressor, bytes.count)
        var written = 0
        // Uninitialized: the compressor writes the bytes kept, and nothing reads the rest.
        let output = [UInt8](unsafeUninitializedCapacity: bound) { out, count in
            written = bytes.withUnsafeBytes { source in
                libdeflate_zlib_compress(compressor, source.baseAddress, source.count, out.baseAddress, out.count)
            }
            count = written
        }
        guard written > 0 else {
            throw TransportError(.decompressionFailed, "libdeflate could not compress \(bytes.count) bytes into its own bound")
        }
        return output
        #else
        throw TransportError(.protocolViolation, "this build has no libdeflate: compress with zlib (Compression.Settings.zlibFrames)")
        #endif
    }

    private static func zlibDeflate(_ bytes: [UInt8], settings: Settings) throws -> [UInt8] {
        let level = settings.level
        guard level == Z_DEFAULT_COMPRESSION || (0...9).contains(level) else {
            throw TransportError(.protocolViolation, "compression level \(level) is not in -1...9")
        }
        if let chain = settings.maxChain, !(1...4096).contains(chain) {
            throw TransportError(.protocolViolation, "a hash-chain search of \(chain) is not in 1...4096")
        }
        guard bytes.count <= Int(clamping: UInt32.max) else {
            throw TransportError(.oversizedFrame, "\(bytes.count) bytes are too many to compress in one piece")
        }
        var stream = z_stream()
        let initStatus = deflateInit2_(&stream, level, Z_DEFLATED, MAX_WBITS, 8, settings.strategy.rawValue,
                                       ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard initStatus == Z_OK else {
            throw TransportError(.decompressionFailed, "zlib could not start compressing (status \(initStatus))")
        }
        defer { deflateEnd(&stream) }
        if let chain = settings.maxChain, level == Z_DEFAULT_COMPRESSION || level >= 4 {
            // Levels 4...9 search lazily (good, lazy and nice lengths as zlib's level 5 has them).
            let tuned = deflateTune(&stream, 8, 16, 32, chain)
            guard tuned == Z_OK else {
                throw TransportError(.decompressionFailed, "zlib could not tune compression (status \(tuned))")
            }
        }
        // zlib wants a non-null input pointer even for zero bytes.
        let input = bytes.isEmpty ? [0] : bytes
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, UInt(bytes.count))))
        let status = output.withUnsafeMutableBufferPointer { out in
            input.withUnsafeBufferPointer { source in
                stream.next_in = UnsafeMutablePointer(mutating: source.baseAddress!)
                stream.avail_in = UInt32(bytes.count)
                stream.next_out = out.baseAddress!
                stream.avail_out = UInt32(clamping: out.count)
                return CZlib.deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else {
            throw TransportError(.decompressionFailed, "zlib could not compress (status \(status))")
        }
        output.removeSubrange(Int(stream.total_out)...)
        return output
    }

    /// Inflates zlib-format `bytes`. Output beyond `maxOutputSize` bytes
    /// throws `.decompressionFailed` without allocating more than the limit;
    /// corrupt, truncated or trailing input throws `.decompressionFailed`.
    /// With libdeflate where this build has it (`hasLibdeflate`), else zlib.
    public static func inflate(_ bytes: [UInt8], maxOutputSize: Int) throws -> [UInt8] {
        #if canImport(CLibdeflate)
        try libdeflateInflate(bytes, maxOutputSize: maxOutputSize)
        #else
        try zlibInflate(bytes, maxOutputSize: maxOutputSize)
        #endif
    }

    #if canImport(CLibdeflate)
    /// `inflate` with libdeflate, which inflates whole buffers: into room for
    /// four times the input, then sixteen times, and so on up to the limit,
    /// each try from the start (what a bomb costs stays within 4/3 of the limit).
    static func libdeflateInflate(_ bytes: [UInt8], maxOutputSize: Int) throws -> [UInt8] {
        guard !bytes.isEmpty else {
            throw TransportError(.decompressionFailed, "compressed data is empty")
        }
        let limit = max(0, maxOutputSize)
        guard let decompressor = libdeflate_alloc_decompressor() else {
            throw TransportError(.decompressionFailed, "libdeflate could not start inflating (out of memory)")
        }
        defer { libdeflate_free_decompressor(decompressor) }
        var room = min(limit, max(256, bytes.count.multipliedReportingOverflow(by: 4).overflow ? limit : bytes.count * 4))
        while true {
            var result = LIBDEFLATE_SUCCESS
            var consumed = 0
            let output = [UInt8](unsafeUninitializedCapacity: max(room, 1)) { out, count in
                var produced = 0
                result = bytes.withUnsafeBytes { source in
                    libdeflate_zlib_decompress_ex(decompressor, source.baseAddress, source.count, out.baseAddress, room,
                                                  &consumed, &produced)
                }
                count = result == LIBDEFLATE_SUCCESS ? produced : 0
            }
            switch result {
            case LIBDEFLATE_SUCCESS:
                guard consumed == bytes.count else {
                    throw TransportError(.decompressionFailed, "\(bytes.count - consumed) trailing bytes after the compressed data")
                }
                // Room left far beyond what came out is given back (the array would keep it).
                guard output.count + output.count / 4 + 4096 < room else { return output }
                return [UInt8](unsafeUninitializedCapacity: output.count) { copy, count in
                    count = copy.initialize(fromContentsOf: output)
                }
            case LIBDEFLATE_INSUFFICIENT_SPACE where room < limit:
                room = room > limit / 4 ? limit : room * 4
            case LIBDEFLATE_INSUFFICIENT_SPACE:
                throw TransportError(.decompressionFailed, "inflated data exceeds the \(limit)-byte limit")
            default:
                throw TransportError(.decompressionFailed, "compressed data is corrupt or truncated (libdeflate result \(result.rawValue))")
            }
        }
    }
    #endif

    /// `inflate` with zlib's streaming inflater: what builds without libdeflate
    /// inflate with, and the raw zlib baseline the benchmarks measure against.
    package static func zlibInflate(_ bytes: [UInt8], maxOutputSize: Int) throws -> [UInt8] {
        guard !bytes.isEmpty else {
            throw TransportError(.decompressionFailed, "compressed data is empty")
        }
        let limit = max(0, maxOutputSize)
        var stream = z_stream()
        let initStatus = inflateInit_(&stream, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard initStatus == Z_OK else {
            throw TransportError(.decompressionFailed, "zlib could not start inflating (status \(initStatus))")
        }
        defer { inflateEnd(&stream) }

        // Start small and grow by doubling, never past the limit.
        var output = [UInt8](repeating: 0, count: min(limit, max(64, bytes.count.multipliedReportingOverflow(by: 4).overflow ? limit : bytes.count * 4)))
        var probe: [UInt8] = [0]
        var produced = 0
        return try bytes.withUnsafeBufferPointer { input in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress!)
            stream.avail_in = UInt32(clamping: input.count)
            while true {
                if produced == output.count, output.count < limit {
                    let grown = output.count > limit / 2 ? limit : min(limit, max(64, output.count * 2))  // no overflow on 32 bits
                    output.append(contentsOf: repeatElement(0, count: grown - output.count))
                }
                let status: Int32
                if produced < output.count {
                    status = output.withUnsafeMutableBufferPointer { out in
                        stream.next_out = out.baseAddress! + produced
                        stream.avail_out = UInt32(clamping: out.count - produced)
                        let result = CZlib.inflate(&stream, Z_NO_FLUSH)
                        produced = out.count - Int(stream.avail_out)
                        return result
                    }
                } else {
                    // At the limit: if even one more byte comes out, the limit is exceeded.
                    status = probe.withUnsafeMutableBufferPointer { out in
                        stream.next_out = out.baseAddress!
                        stream.avail_out = 1
                        return CZlib.inflate(&stream, Z_NO_FLUSH)
                    }
                    if stream.avail_out == 0 {
                        throw TransportError(
                            .decompressionFailed, "inflated data exceeds the \(limit)-byte limit")
                    }
                    if status == Z_BUF_ERROR || status == Z_OK {
                        // No output and no end of stream: the input ran out.
                        throw TransportError(.decompressionFailed, "compressed data is truncated")
                    }
                }
                switch status {
                case Z_STREAM_END:
                    guard stream.avail_in == 0 else {
                        throw TransportError(
                            .decompressionFailed, "\(stream.avail_in) trailing bytes after the compressed data")
                    }
                    output.removeSubrange(produced...)
                    return output
                case Z_OK:
                    continue
                case Z_BUF_ERROR where stream.avail_in == 0:
                    throw TransportError(.decompressionFailed, "compressed data is truncated")
                case Z_BUF_ERROR:
                    continue
                default:
                    throw TransportError(.decompressionFailed, "compressed data is corrupt (zlib status \(status))")
                }
            }
        }
    }
}

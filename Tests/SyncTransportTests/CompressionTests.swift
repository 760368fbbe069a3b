import Testing
@testable import SyncTransport

@Suite struct CompressionTests {
    /// Frames and chunks are checked with libdeflate's CRC-32 where the build has it:
    /// zlib's values, whole and continued, at every length and split.
    @Test func crc32IsZlibsAtEveryLengthAndSplit() {
        var random = SeededRandom(seed: 32)
        for count in [0, 1, 2, 3, 7, 8, 15, 16, 31, 63, 64, 255, 4096, 65_537, 1 << 20] {
            let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(Checksum.crc32(bytes) == Checksum.zlibCRC32(bytes, continuing: 0), "\(count) bytes")
            let split = count == 0 ? 0 : Int(random.next(below: UInt64(count)))
            let head = Array(bytes[..<split]), tail = Array(bytes[split...])
            #expect(Checksum.crc32(tail, continuing: Checksum.crc32(head)) == Checksum.crc32(bytes), "\(count) bytes split at \(split)")
        }
        #expect(Checksum.crc32([], continuing: 0xDEAD_BEEF) == 0xDEAD_BEEF)
    }

    @Test func crc32MatchesKnownValues() {
        #expect(Checksum.crc32([]) == 0)
        #expect(Checksum.crc32(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(Checksum.crc32(Array("The quick brown fox jumps over the lazy dog".utf8)) == 0x414F_A339)
        let a = Array("hello ".utf8), b = Array("world".utf8)
        #expect(Checksum.crc32(b, continuing: Checksum.crc32(a)) == Checksum.crc32(a + b))
    }

    @Test(arguments: [0, 1, 100, 70_000])
    func deflateRoundTrips(size: Int) throws {
        let text = Array(String(repeating: "sync engine ", count: size / 12 + 1).utf8.prefix(size))
        let deflated = try Compression.deflate(text)
        #expect(try Compression.inflate(deflated, maxOutputSize: size) == text)
        if size > 1_000 { #expect(deflated.count < text.count / 10) }
        let random = randomBytes(size, seed: 1)
        #expect(try Compression.inflate(Compression.deflate(random, level: 9), maxOutputSize: size) == random)
        #expect(try Compression.inflate(Compression.deflate(random, level: 0), maxOutputSize: size) == random)
    }

    @Test func deflateRejectsBadLevels() {
        expectCode(.protocolViolation) { _ = try Compression.deflate([1], level: 12) }
        expectCode(.protocolViolation) {
            _ = try Compression.deflate([1], settings: Compression.Settings(level: 5, maxChain: 0))
        }
    }

    /// JSON notes of words and random numbers, as `syncsim bench sync` writes them.
    static func notes(count: Int) -> [UInt8] {
        var random = SeededRandom(seed: 7)
        let words = ["steps", "heart", "rate", "sleep", "stand", "move", "exercise", "calories"]
        var text = ""
        for i in 0..<count {
            let note = (0..<14).map { _ in words[Int(random.next(below: UInt64(words.count)))] + String(random.next(below: 10_000)) }
            text += "{\"id\":\(i),\"note\":\"\(note.joined(separator: " "))\"}"
        }
        return Array(text.utf8)
    }

    @Test func frameSettingsRoundTripAndTakeEffect() throws {
        let notes = Self.notes(count: 2_000)
        let framed = try Compression.deflate(notes, settings: .frames)
        #expect(try Compression.inflate(framed, maxOutputSize: notes.count) == notes)
        let plain = try Compression.deflate(notes, level: 5)
        // Another strategy and search: other bytes, about as small (no short matches in random digits).
        #expect(framed != plain)
        #expect(Double(framed.count) <= Double(plain.count) * 1.03)
        // zlib's default level is 6, and levels below 4 (greedy matching) take no search length.
        #expect(try Compression.deflate(notes, settings: Compression.Settings(level: -1, maxChain: 8))
            == Compression.deflate(notes, settings: Compression.Settings(level: 6, maxChain: 8)))
        #expect(try Compression.deflate(notes, settings: Compression.Settings(level: 1, maxChain: 8)) == Compression.deflate(notes, level: 1))
        for settings in [Compression.Settings(level: 9, strategy: .filtered, maxChain: 1),
                         Compression.Settings(level: 1, maxChain: 8), Compression.Settings(level: 0, strategy: .filtered)] {
            for input in [[], [42], notes, randomBytes(70_000, seed: 3)] {
                #expect(try Compression.inflate(Compression.deflate(input, settings: settings), maxOutputSize: input.count) == input)
            }
        }
    }

    /// libdeflate writes the zlib format: zlib inflates what it writes, at every level.
    @Test(.enabled(if: Compression.hasLibdeflate), arguments: [Int32(0), 1, 5, 12])
    func libdeflateOutputInflatesWithZlib(level: Int32) throws {
        let notes = Self.notes(count: 500)
        for input in [[], [42], notes, randomBytes(70_000, seed: 4)] {
            let deflated = try Compression.deflate(input, settings: .libdeflate(level: level))
            #expect(try Compression.inflate(deflated, maxOutputSize: input.count) == input)
            if level > 0, input == notes { #expect(deflated.count < notes.count / 2) }
        }
    }

    @Test func libdeflateLevelsAreChecked() {
        expectCode(.protocolViolation) { _ = try Compression.deflate([1], settings: .libdeflate(level: 13)) }
        expectCode(.protocolViolation) { _ = try Compression.deflate([1], settings: .libdeflate(level: -1)) }
        if !Compression.hasLibdeflate {
            expectCode(.protocolViolation) { _ = try Compression.deflate([1], settings: .libdeflate(level: 5)) }
        }
    }

    /// Frames are deflated with libdeflate's level 5 where the build has it:
    /// smaller than zlib's frame settings on the benchmark's kind of batch.
    @Test func framesUseLibdeflateWhereTheBuildHasIt() throws {
        #if os(Linux)
        #expect(Compression.hasLibdeflate, "Linux builds link libdeflate (libdeflate-dev)")
        #endif
        guard Compression.hasLibdeflate else {
            #expect(Compression.Settings.frames == .zlibFrames)
            return
        }
        #expect(Compression.Settings.frames == .libdeflate(level: 5))
        let notes = Self.notes(count: 2_000)
        let framed = try Compression.deflate(notes, settings: .frames)
        let zlibFramed = try Compression.deflate(notes, settings: .zlibFrames)
        #expect(try Compression.inflate(framed, maxOutputSize: notes.count) == notes)
        #expect(framed.count < zlibFramed.count, "libdeflate 5: \(framed.count) bytes, zlib's frame settings: \(zlibFramed.count)")
    }

    /// Both inflaters: `inflate` (libdeflate where the build has it) and zlib's, which
    /// builds without libdeflate use; every inflate test runs over each.
    static let inflaters: [(name: String, inflate: @Sendable ([UInt8], Int) throws -> [UInt8])] = [
        ("inflate", { try Compression.inflate($0, maxOutputSize: $1) }),
        ("zlib", { try Compression.zlibInflate($0, maxOutputSize: $1) }),
    ]

    @Test(arguments: inflaters.indices)
    func inflateStopsAtTheLimit(_ which: Int) throws {
        let inflate = Self.inflaters[which].inflate
        // A 16 MiB bomb that deflates to ~16 KiB.
        let bomb = try Compression.deflate([UInt8](repeating: 0, count: 16 << 20), level: 9)
        #expect(bomb.count < 20_000)
        let error = expectCode(.decompressionFailed) { _ = try inflate(bomb, 1 << 20) }
        #expect(error?.message.contains("1048576-byte limit") == true)
        // Exactly at the limit is fine; one byte less is not.
        let exact = try Compression.deflate([UInt8](repeating: 7, count: 1000))
        #expect(try inflate(exact, 1000).count == 1000)
        expectCode(.decompressionFailed) { _ = try inflate(exact, 999) }
        expectCode(.decompressionFailed) { _ = try inflate(exact, 0) }
        // Output of every size, past the first room (four times the input) and the next.
        for size in [0, 1, 255, 4_096, 100_000, 1 << 20] {
            let zeros = [UInt8](repeating: 0, count: size), notes = Array(Self.notes(count: size / 150 + 1).prefix(size))
            for input in [zeros, notes] {
                let deflated = try Compression.deflate(input, settings: .frames)
                #expect(try inflate(deflated, size) == input, "\(Self.inflaters[which].name), \(size) bytes")
                #expect(try inflate(deflated, 16 << 20) == input)
                if size > 0 { expectCode(.decompressionFailed) { _ = try inflate(deflated, size - 1) } }
            }
        }
    }

    @Test(arguments: inflaters.indices)
    func inflateRejectsGarbageTruncationAndTrailingBytes(_ which: Int) throws {
        let inflate = Self.inflaters[which].inflate
        let good = try Compression.deflate(Array("some text to compress, some text to compress".utf8))
        expectCode(.decompressionFailed) { _ = try inflate([], 100) }
        expectCode(.decompressionFailed) { _ = try inflate(Array("not zlib at all".utf8), 100) }
        expectCode(.decompressionFailed) { _ = try inflate(Array(good.dropLast(3)), 100) }
        expectCode(.decompressionFailed) { _ = try inflate(good + [0], 100) }
        var corrupt = good
        corrupt[corrupt.count - 1] ^= 0xFF  // Adler-32 trailer
        expectCode(.decompressionFailed) { _ = try inflate(corrupt, 100) }
        // Every truncation of a larger stream, and a flipped bit in each byte of its first 64.
        let notes = try Compression.deflate(Self.notes(count: 20), settings: .frames)
        for cut in stride(from: 1, to: notes.count, by: 7) {
            expectCode(.decompressionFailed) { _ = try inflate(Array(notes.prefix(cut)), 1 << 20) }
        }
        for index in 0..<64 {
            var flipped = notes
            flipped[index] ^= 0x10
            #expect(throws: TransportError.self) { _ = try inflate(flipped, 1 << 20) }
        }
    }
}

import Foundation
@testable import SyncEngine
@testable import SyncSim
import SyncTransport
import Testing

/// What a user can type or pass to `syncsim`: refused with a clear error,
/// never a trap, and never a failure that goes unreported.
@Suite struct SyncSimInputTests {
    /// `wait-idle inf` (or 1e300) trapped converting seconds to milliseconds.
    @Test func waitIdleRefusesNumbersPastAYear() async throws {
        let setup = try await ListeningPhoneNode(keys: #"{"keys":[{"name":"a"}]}"#)
        let phone = setup.phone
        defer { phone.stop() }
        for bad in ["inf", "1e300", "-1", "9e15"] {
            phone.send("wait-idle \(bad)")
            let reply = try await phone.reply("wait-idle \(bad)")
            #expect(reply["ok"] as? Bool == false && (reply["error"] as? String)?.contains("a year") == true, "\(reply)")
        }
        phone.send("put a 1")
        #expect(try await phone.reply("put")["ok"] as? Bool == true, "the node still runs")
    }

    /// A misspelled field in a key registry left its key at the defaults: a
    /// key meant to be encrypted and never synced was stored in plain text and synced.
    @Test func aRegistryFieldNoKeyDeclaresIsRefused() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"ok","policy":"never"},{"name":"pin","securty":"encrypted","policy":"never"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect { _ = try KeyRegistry.load(jsonFile: path) } throws: {
            ($0 as? SyncError)?.code == .invalidConfiguration && "\($0)".contains("'securty'") && "\($0)".contains("pin")
        }
        try Data(#"{"keys":[{"name":"pin","security":"encrypted","policy":"never","availability":"phoneOnly","type":"String"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect(try KeyRegistry.load(jsonFile: path).descriptors.map(\.security) == [.encrypted])
    }

    /// `--connect HOST:0` passed validation (port 0 is only `--listen`'s "any
    /// free port"), and the node retried a connection that can never be made,
    /// for ever, with one error event after another: a usage error now.
    @Test func connectingToPortZeroIsAUsageError() throws {
        let base = ["--role", "watch", "--db", "w.sqlite", "--keys", "k.json", "--secret-file", "p.secret"]
        #expect(throws: (any Error).self) { _ = try NodeCommand.parse(base + ["--connect", "127.0.0.1:0"]) }
        _ = try NodeCommand.parse(base + ["--connect", "127.0.0.1:7000"])
        _ = try NodeCommand.parse(["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "p.secret", "--listen", "127.0.0.1:0"])
    }

    /// `--out-dir` that cannot take a file lost the failure a run found (the
    /// write came before the report); a seed past Int64.max wrote a failure
    /// file that `run` refused. Both are usage errors now, before any run.
    @Test func fuzzRefusesAnOutDirItCannotWriteAndSeedsThatCannotReplay() throws {
        let folder = TempFolder()
        try Data().write(to: URL(fileURLWithPath: folder.file("a-file")))
        for arguments in [["--out-dir", folder.file("missing")], ["--out-dir", folder.file("a-file")],
                          ["--seed", "18446744073709551610"], ["--seed", "\(Int64.max)"]] {
            #expect(throws: (any Error).self, "\(arguments)") { _ = try FuzzCommand.parse(["--runs", "2"] + arguments) }
        }
        _ = try FuzzCommand.parse(["--runs", "2", "--seed", "\(Int64.max - 2)", "--out-dir", folder.path])
    }

    /// `write-loop --batch=-1` trapped (a range with its bounds reversed, exit
    /// 132), `--batch 0` printed -1 for ever and a huge batch never ended:
    /// `--batch` outside 1...10000 is a usage error (64) now, before any store is made.
    @Test func writeLoopRefusesABatchSizeOutsideItsRange() async throws {
        let folder = TempFolder()
        let db = folder.file("loop.sqlite")
        for bad in ["-1", "0", "10001", "\(Int.max)"] {
            #expect(throws: (any Error).self, "--batch \(bad)") { _ = try WriteLoopCommand.parse(["--db", db, "--batch=\(bad)"]) }
        }
        _ = try WriteLoopCommand.parse(["--db", db, "--batch", "1"])
        _ = try WriteLoopCommand.parse(["--db", db, "--batch", "10000"])
        let refused = try await InputFileThatIsNoRegularFileTests().syncsim(["write-loop", "--db", db, "--batch=-1"])
        #expect(refused.status == Simulation.Exit.usage, "\(refused.stderr)")
        #expect(refused.stderr.contains("--batch") && refused.stderr.contains("1...10000"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: db), "a store was made for a refused command")
    }
}

/// `syncsim inspect` of a damaged store listed the rows before the damage and
/// exited 0, as if that were all.
@Suite struct InspectionOfADamagedStoreTests {
    @Test func aDamagedPageEndsTheListingWithAnError() async throws {
        let folder = TempFolder()
        let path = folder.file("big.sqlite")
        let family = KeyFamily<String>("k", default: "")
        do {
            let store = try SyncStore(path: path, role: .phone, registry: try KeyRegistry([family]))
            try store.batchNow { batch in
                for i in 0..<3_000 { try batch.set(String(repeating: "v", count: 200) + "\(i)", for: family["\(i)"]) }
            }
            store.close()
        }
        try rawSQL(path, "PRAGMA wal_checkpoint(TRUNCATE)")
        #expect(try SyncStore.inspect(path: path).entries.count == 3_000)
        // Three pages in the middle of the file overwritten.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: (size / 2 / 4096) * 4096)
        try handle.write(contentsOf: Data(repeating: 0xAB, count: 3 * 4096))
        try handle.close()
        #expect { _ = try SyncStore.inspect(path: path) } throws: { ($0 as? SyncError)?.code == .databaseCorrupt }
    }
}

/// A FIFO where a file was expected: opening it for reading waited for a writer, for ever.
@Suite struct FIFOInsteadOfAFileTests {
    @Test func aFIFOIsRefusedWithoutWaiting() throws {
        let folder = TempFolder()
        let fifo = folder.file("fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        #expect { _ = try SyncStore.inspect(path: fifo) } throws: { ($0 as? SyncError)?.code == .notADatabase }
        #expect { _ = try PairingSecret.load(from: fifo) } throws: { ($0 as? TransportError)?.code == .badSecretFile }
    }
}

/// A registry or scenario path naming a FIFO, a device or a huge file:
/// `syncsim run` waited for ever for a FIFO's writer, and read `/dev/zero`
/// until memory ran out. Now refused at once as a file that cannot be used (2).
@Suite(.timeLimit(.minutes(5))) struct InputFileThatIsNoRegularFileTests {
    struct Outcome {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs the built binary; it must exit within 30 s (else it is killed and the test fails).
    func syncsim(_ arguments: [String]) async throws -> Outcome {
        let binary = syncsimBinary()
        try #require(FileManager.default.isExecutableFile(atPath: binary), "syncsim is not built at \(binary)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let what = "syncsim \(arguments.joined(separator: " "))"
        async let stdout = output(of: out, "\(what): stdout", within: .seconds(30))
        async let stderr = output(of: err, "\(what): stderr", within: .seconds(30))
        let status = try await exitStatus(of: process, what, within: .seconds(30))
        let (o, e) = try await (stdout, stderr)
        return Outcome(status: status, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }

    @Test func runRefusesAScenarioOrRegistryThatIsNoRegularFile() async throws {
        let folder = TempFolder()
        let fifo = folder.file("scenario.fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let fromFIFO = try await syncsim(["run", fifo])
        #expect(fromFIFO.status == Simulation.Exit.badScenario, "\(fromFIFO.stderr)")
        #expect(fromFIFO.stderr.contains("not a regular file"), "\(fromFIFO.stderr)")

        let fromZero = try await syncsim(["run", "/dev/zero"])
        #expect(fromZero.status == Simulation.Exit.badScenario, "\(fromZero.stderr)")
        #expect(fromZero.stderr.contains("not a regular file"), "\(fromZero.stderr)")

        // A scenario whose keysFile is a FIFO.
        let keysFIFO = folder.file("keys.fifo")
        try #require(mkfifo(keysFIFO, 0o600) == 0)
        let scenario = folder.file("s.json")
        try #"{"description": "keys from a FIFO", "seed": 1, "keysFile": "keys.fifo", "timeline": []}"#.write(toFile: scenario, atomically: true, encoding: .utf8)
        let keysFromFIFO = try await syncsim(["run", scenario])
        #expect(keysFromFIFO.status == Simulation.Exit.badScenario, "\(keysFromFIFO.stderr)")
        #expect(keysFromFIFO.stderr.contains("keysFile") && keysFromFIFO.stderr.contains("not a regular file"), "\(keysFromFIFO.stderr)")

        // A regular file far larger than any scenario (sparse: no disk used).
        let huge = folder.file("huge.json")
        #expect(FileManager.default.createFile(atPath: huge, contents: nil))
        #expect(truncate(huge, 1 << 30) == 0)
        let fromHuge = try await syncsim(["run", huge])
        #expect(fromHuge.status == Simulation.Exit.badScenario, "\(fromHuge.stderr)")
        #expect(fromHuge.stderr.contains("bytes, over"), "\(fromHuge.stderr)")
    }

    @Test func nodeRefusesARegistryThatIsNoRegularFile() async throws {
        let folder = TempFolder()
        let secret = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secret)
        let fifo = folder.file("keys.fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        for keys in [fifo, "/dev/zero"] {
            let node = try await syncsim(["node", "--role", "phone", "--db", folder.file("p.sqlite"), "--keys", keys,
                                          "--secret-file", secret, "--listen", "127.0.0.1:0"])
            #expect(node.status == Simulation.Exit.badInput, "\(keys): \(node.stderr)")
            #expect(node.stdout.contains(#""event":"error""#) && node.stdout.contains("not a regular file"), "\(keys): \(node.stdout)")
        }
        #expect { _ = try KeyRegistry.load(jsonFile: folder.path) } throws: {
            ($0 as? SyncError)?.code == .invalidConfiguration && "\($0)".contains("not a regular file")
        }
    }
}
/// `syncsim node --keys` took any `encoding` (`"encoding": "yaml"`), which
/// the scenario's registries refuse: a key of an encoding no peer decodes.
@Suite struct NodeRegistryEncodingTests {
    @Test func anUnknownEncodingIsRefusedNamingTheKey() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"ok"},{"name":"weird","encoding":"yaml"}]}"#.utf8).write(to: URL(fileURLWithPath: path))
        #expect { _ = try KeyRegistry.load(jsonFile: path) } throws: {
            ($0 as? SyncError)?.code == .invalidConfiguration && "\($0)".contains("weird") && "\($0)".contains("'yaml'")
        }
        for encoding in ["json", "string", "data"] {
            try Data(#"{"keys":[{"name":"k","encoding":"\#(encoding)"}]}"#.utf8).write(to: URL(fileURLWithPath: path))
            #expect(try KeyRegistry.load(jsonFile: path).descriptors.map(\.encoding) == [encoding])
        }
    }
}

/// `syncsim pair --out /dev/null --force` renamed its temporary file over the
/// device: `/dev/null` became a regular file holding the secret (and a FIFO
/// or a symbolic link to a device likewise). A directory without `--force`
/// was said to be an existing secret, to replace with `--force`.
@Suite struct PairOutputThatIsNoRegularFileTests {
    @Test func pairRefusesToReplaceWhatIsNoRegularFile() throws {
        let folder = TempFolder()
        let fifo = folder.file("out.fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let link = folder.file("link")
        try #require(symlink(fifo, link) == 0)
        for path in [fifo, link, folder.path] {
            for force in [true, false] {
                let command = try PairCommand.parse(["--out", path] + (force ? ["--force"] : []))
                #expect(throws: CommandFailure.self, "\(path) \(force)") { try command.run() }
                do {
                    try command.run()
                } catch let failure as CommandFailure {
                    #expect(failure.message.contains("not a regular file") && !failure.message.contains("--force"), "\(failure.message)")
                }
                #expect { try PairingSecret.generate().write(to: path, overwrite: force) } throws: {
                    ($0 as? TransportError)?.code == .badSecretFile && "\($0)".contains("not a regular file")
                }
            }
        }
        var info = stat()
        #expect(lstat(fifo, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO, "the FIFO is still a FIFO")
        #expect(lstat(link, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK, "the link is still a link")
        // A regular file is still replaced with --force.
        let file = folder.file("pair.secret")
        try PairCommand.parse(["--out", file]).run()
        try PairCommand.parse(["--out", file, "--force"]).run()
        _ = try PairingSecret.load(from: file)
    }
}

/// `syncsim node` answered a line it could not take (a value that is not
/// JSON, an unknown command, a bad number) with `{"ok":false,"error":...}`
/// and no `code`, which the README promises on every failure; a value that
/// is not JSON was answered with Foundation's `Error Domain=NSCocoaErrorDomain Code=3840 …`.
@Suite struct NodeConsoleFailureCodeTests {
    @Test func everyFailedCommandHasACodeAndAClearMessage() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry(descriptors: [KeyDescriptor(name: "a"), KeyDescriptor(name: "s", encoding: "string")])
        let store = try SyncStore(path: folder.file("n.sqlite"), role: .phone, registry: registry)
        defer { store.close() }
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let console = NodeConsole(store: store, peer: peer, output: JSONLineWriter(handle: FileHandle.nullDevice))
        for line in ["put a {bad", "put a", "frobnicate", "wait-idle soon", "forget-peer zz"] {
            let reply = await console.execute(line)
            #expect(reply["ok"] as? Bool == false, "\(line): \(reply)")
            #expect(reply["code"] as? String == "invalid-command", "\(line): \(reply)")
            #expect((reply["error"] as? String)?.contains("NSCocoaErrorDomain") == false, "\(line): \(reply)")
        }
        let notJSON = await console.execute("put a {bad")
        #expect((notJSON["error"] as? String)?.contains("not JSON") == true, "\(notJSON)")
        // Why it is not, when the parser says: JSON nested past its depth is JSON to the eye.
        let deep = await console.execute("put a " + String(repeating: "[", count: 3_000) + String(repeating: "]", count: 3_000))
        #expect((deep["error"] as? String)?.contains("nested") == true, "\(deep)")
        #expect((deep["error"] as? String)?.contains("NSCocoaErrorDomain") == false, "\(deep)")
        // Bytes of a JSON key that are not JSON (a tool wrote them): a code, not Foundation's text.
        try store.setEncoded(Array("plain text".utf8), forKey: "a")
        let get = await console.execute("get a")
        #expect(get["ok"] as? Bool == false && get["code"] as? String == "type-mismatch", "\(get)")
        #expect((get["error"] as? String)?.contains("NSCocoaErrorDomain") == false, "\(get)")
        #expect(await console.execute("put a 1")["ok"] as? Bool == true)
    }
}

/// `--connect :7000` (no host) passed validation, and the watch node dialed
/// a host that cannot exist for ever, one DNS error event after another;
/// `--listen :0` got as far as binding. Both are usage errors now.
@Suite struct NodeAddressWithoutHostTests {
    @Test func anEmptyHostIsAUsageError() throws {
        let watch = ["--role", "watch", "--db", "w.sqlite", "--keys", "k.json", "--secret-file", "p.secret"]
        let phone = ["--role", "phone", "--db", "p.sqlite", "--keys", "k.json", "--secret-file", "p.secret"]
        for arguments in [watch + ["--connect", ":7000"], watch + ["--connect", " :7000"], phone + ["--listen", ":0"]] {
            #expect(throws: (any Error).self, "\(arguments)") { _ = try NodeCommand.parse(arguments) }
        }
        _ = try NodeCommand.parse(watch + ["--connect", "localhost:7000"])
        _ = try NodeCommand.parse(phone + ["--listen", "0.0.0.0:0"])
    }
}

/// `syncsim node` stored `put s "hi"` for a key of `"encoding": "string"` as
/// the JSON literal `"hi"`, quotes included, where a scenario (the same keys
/// format) and an app's `.string` serializer store `hi`; and it could not
/// show the `hi` an app wrote there.
@Suite struct NodeStringAndDataKeysTests {
    @Test func stringAndDataKeysTakeAndShowTheStringsBytes() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry(descriptors: [KeyDescriptor(name: "j"), KeyDescriptor(name: "s", encoding: "string"),
                                                     KeyDescriptor(name: "d", encoding: "data")])
        let store = try SyncStore(path: folder.file("n.sqlite"), role: .phone, registry: registry)
        defer { store.close() }
        let peer = SyncPeer(store: store, configuration: ReplicationConfiguration(pairingEpoch: PairingSecret.generate().epoch))
        let console = NodeConsole(store: store, peer: peer, output: JSONLineWriter(handle: FileHandle.nullDevice))
        #expect(await console.execute(#"put s "hi there""#)["ok"] as? Bool == true)
        #expect(try store.encodedValue(forKey: "s") == Array("hi there".utf8))
        #expect(await console.execute(#"put d "raw""#)["ok"] as? Bool == true)
        #expect(try store.encodedValue(forKey: "d") == Array("raw".utf8))
        #expect(await console.execute(#"put j "hi""#)["ok"] as? Bool == true)
        #expect(try store.encodedValue(forKey: "j") == Array(#""hi""#.utf8), "a JSON key keeps the JSON text")
        // What an app wrote through `.string`: shown as a string.
        try store.setEncoded(Array("from the app".utf8), forKey: "s")
        #expect(await console.execute("get s")["value"] as? String == "from the app")
        // A string key takes only a string.
        let number = await console.execute("put s 5")
        #expect(number["ok"] as? Bool == false && number["code"] as? String == "invalid-command", "\(number)")
    }
}

/// A key registry file with a field of the wrong type or value was refused
/// with a raw `DecodingError` dump (`typeMismatch(Swift.Bool, Context(codingPath: …`):
/// now, as a scenario file, with the field, its line and what is expected.
@Suite(.timeLimit(.minutes(5))) struct RegistryDecodingErrorTests {
    /// The message `KeyRegistry.load(jsonFile:)` refuses `text` with.
    private func refusal(_ text: String) throws -> String {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        do {
            _ = try KeyRegistry.load(jsonFile: path)
        } catch let error as SyncError {
            #expect(error.code == .invalidConfiguration, "\(error)")
            let message = error.message.replacingOccurrences(of: folder.path + "/", with: "")
            for raw in ["DecodingError", "typeMismatch", "dataCorrupted", "keyNotFound", "CodingKeys", "Context(", "Swift."] {
                #expect(!message.contains(raw), "a raw decoding error: \(message)")
            }
            return message
        }
        Issue.record("\(text) was accepted")
        return ""
    }

    @Test func eachFieldErrorNamesTheFieldItsLineAndWhatIsExpected() throws {
        let family = try refusal(#"{"keys":[{"name":"a","family":"yes"}]}"#)
        #expect(family.contains("keys.json:1") && family.contains("keys[0].family") && family.contains("true or false"), "\(family)")

        let availability = try refusal("{\"keys\": [\n  {\"name\": \"a\"},\n  {\"name\": \"b\", \"availability\": \"sometimes\"}\n]}")
        #expect(availability.contains("keys.json:3") && availability.contains("keys[1].availability"), "\(availability)")
        #expect(availability.contains("phoneWithWatchSync") && availability.contains("sometimes"), "\(availability)")

        let name = try refusal("{\"keys\": [\n  {\"policy\": \"manual\"}\n]}")
        #expect(name.contains("keys.json:2") && name.contains("keys[0].name") && name.contains("required"), "\(name)")

        let nullName = try refusal(#"{"keys":[{"name":null}]}"#)
        #expect(nullName.contains("keys[0].name"), "\(nullName)")

        let notArray = try refusal(#"{"keys":{"name":"a"}}"#)
        #expect(notArray.contains("field 'keys'") && notArray.contains("array"), "\(notArray)")

        let noKeys = try refusal(#"{"kyes":[]}"#)
        #expect(noKeys.contains("field 'keys'") && noKeys.contains("required"), "\(noKeys)")

        let syntax = try refusal("{\"keys\": [\n  {\"name\": \"a\",}\n]}")
        #expect(syntax.contains("keys.json:2") && syntax.contains("not valid JSON"), "\(syntax)")
    }

    /// The defect's own repro: `syncsim node --keys` with such a file.
    @Test func nodeReportsTheFieldAndLine() async throws {
        let folder = TempFolder()
        let keys = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"a","family":"yes"}]}"#.utf8).write(to: URL(fileURLWithPath: keys))
        let secret = folder.file("pair.secret")
        try PairingSecret.generate().write(to: secret)
        let node = try await InputFileThatIsNoRegularFileTests().syncsim(
            ["node", "--role", "phone", "--db", folder.file("p.sqlite"), "--keys", keys, "--secret-file", secret, "--listen", "127.0.0.1:0"])
        #expect(node.status == Simulation.Exit.badInput, "\(node.stderr)")
        #expect(node.stdout.contains("keys[0].family") && node.stdout.contains("keys.json:1") && !node.stdout.contains("DecodingError"), "\(node.stdout)")
    }
}

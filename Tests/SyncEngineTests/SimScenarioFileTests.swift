import Foundation
import SyncEngine
@testable import SyncSim
import Testing

/// Scenario and key files through `JSONDecoder`/`JSONEncoder`: strict JSON,
/// errors that name the field and its line, canonical value bytes, and
/// `Scenario.json` reading back to the same scenario.
@Suite struct SimScenarioFileTests {
    static func scenarioText(value: String) -> String {
        """
        {
          "description": "one value",
          "seed": 1,
          "keys": [{"name": "a"}],
          "timeline": [
            {"at": 0, "op": "put", "node": "phone", "key": "a",
             "value": \(value)}
          ]
        }
        """
    }

    static func value(of scenario: Scenario) -> JSONValue? {
        guard case .put(_, _, let value, _) = scenario.timeline.first?.action else { return nil }
        return value
    }

    /// The hand-written parser turned each half of a `\u` surrogate pair into U+FFFD.
    @Test func surrogatePairInAValueIsOneScalar() throws {
        let scenario = try Scenario.parse(Self.scenarioText(value: #""smile \ud83d\ude00""#))
        let value = try #require(Self.value(of: scenario))
        #expect(value == .string("smile \u{1F600}"))
        #expect(Array(value.canonicalText.utf8) == Array("\"smile \u{1F600}\"".utf8))
        #expect(value.canonicalText.utf8.suffix(5).elementsEqual([0xF0, 0x9F, 0x98, 0x80, UInt8(ascii: "\"")]))
    }

    @Test func loneSurrogateIsInvalidJSON() {
        #expect(throws: ScenarioError.self) { try Scenario.parse(Self.scenarioText(value: #""\ud83d""#)) }
    }

    /// The hand-written parser accepted `007` (and kept its text as the value's bytes).
    @Test func leadingZeroIsInvalidJSON() throws {
        do {
            _ = try Scenario.parse(Self.scenarioText(value: "007"), file: "zeros.json")
            Issue.record("007 was accepted")
        } catch {
            #expect(error.field == "")
            #expect(error.line == 7)
            #expect(error.message.hasPrefix("not valid JSON"))
            #expect(error.message.contains("leading zero"))
            #expect(error.description.hasPrefix("zeros.json:7: not valid JSON"))
        }
    }

    /// Foundation's parser lets a trailing comma through; the hand-written parser refused it, and so do we.
    @Test(arguments: [("[\n  {\"name\": \"a\"},\n]", 3), ("[{\"name\": \"a\",\n }]", 2)])
    func trailingCommaIsInvalidJSON(keys: String, line: Int) {
        let text = "{\"description\": \"d\", \"seed\": 1, \"timeline\": [],\n \"keys\": \(keys)}"
        do {
            _ = try Scenario.parse(text)
            Issue.record("a trailing comma was accepted")
        } catch {
            #expect(error.field == "")
            #expect(error.line == line)
            #expect(error.message == "not valid JSON: a comma before the end of an object or array")
        }
        #expect(JSONSyntaxError(validating: Data(#"{"a": "x,]", "b": [1, 2]}"#.utf8)) == nil)
    }

    @Test(arguments: [
        (#"{"b": 1, "a": [true, null, 1.5, -2, "x\ny"]}"#, #"{"a":[true,null,1.5,-2,"x\ny"],"b":1}"#),
        ("2.0", "2"),
        ("1e3", "1000"),
        ("1e15", "1000000000000000"),
        ("-4.5e17", "-450000000000000000"),
        ("1e20", "100000000000000000000"),
        (#""tab\tquote\"""#, #""tab\tquote\"""#),
        ("{}", "{}"),
        ("null", "null"),
    ])
    func valuesHaveCanonicalBytes(text: String, canonical: String) throws {
        let value = try #require(Self.value(of: try Scenario.parse(Self.scenarioText(value: text))))
        #expect(value.canonicalText == canonical)
    }

    @Test func unknownFieldIsRefusedWithTheExpectedOnes() {
        let text = """
        {"description": "d", "seed": 1, "keys": [{"name": "a"}],
         "timeline": [
           {"at": 0, "op": "sync", "node": "phone",
            "colour": "red"}]}
        """
        do {
            _ = try Scenario.parse(text, file: "t.json")
            Issue.record("the unknown field was accepted")
        } catch {
            #expect(error.field == "timeline[0].colour")
            #expect(error.line == 4)
            #expect(error.message == "unknown field; expected one of at, node, op")
        }
    }

    @Test(arguments: [
        (#"{"description": "d", "seed": "one", "keys": [], "timeline": []}"#, "seed", "expected a whole number, found a string"),
        (#"{"description": "d", "seed": 1, "keys": {}, "timeline": []}"#, "keys", "expected an array of keys, found an object"),
        (#"{"description": "d", "seed": 1, "keys": [], "timeline": [{"at": 1.5, "op": "heal"}]}"#, "timeline[0].at", "expected a whole number, found a fraction"),
        (#"{"description": "d", "seed": 1, "keys": [], "timeline": [7]}"#, "timeline[0]", "expected an object, found a number"),
        (#"{"description": "d", "seed": 1, "keys": [], "timeline": [{"at": 0}]}"#, "timeline[0].op", "is required"),
        (#"{"description": "d", "seed": 1, "keys": [], "faults": {"jitterMs": -1}, "timeline": []}"#, "faults.jitterMs", "must be in 0...600000"),
        (#"{"description": "d", "seed": 1, "keys": [], "faults": {"reorderRate": "x"}, "timeline": []}"#, "faults.reorderRate", "expected a number, found a string"),
        (#"{"description": "d", "seed": 1, "keys": [{"name": "a", "family": 1}], "timeline": []}"#, "keys[0].family", "expected true or false"),
        (#"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "timeline": [{"at": 0, "op": "put", "node": "phone", "key": "a"}]}"#, "timeline[0].value", "give exactly one of 'value' or 'size'"),
        (#"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "timeline": [{"at": 0, "op": "delete", "node": "phone", "key": "b"}]}"#, "timeline[0].key", "key 'b' is not declared in the scenario's keys"),
        (#"[1]"#, "", "expected an object, found an array"),
        // Whole numbers past Int64 were said to be fractions.
        (#"{"description": "d", "seed": 99999999999999999999, "keys": [], "timeline": []}"#, "seed", "is out of range: must be in 0...9223372036854775807"),
        (#"{"description": "d", "seed": 1, "keys": [], "timeline": [{"at": 1e20, "op": "heal"}]}"#, "timeline[0].at", "is out of range: must be in 0...86400000"),
        (#"{"description": "d", "seed": 1, "keys": [], "timeline": [{"at": -1e20, "op": "heal"}]}"#, "timeline[0].at", "is out of range: must be in 0...86400000"),
    ])
    func wrongFieldsAreNamed(text: String, field: String, message: String) {
        do {
            _ = try Scenario.parse(text, file: "t.json")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.field == field)
            #expect(error.message == message)
            #expect(error.line == 1)
        }
    }

    @Test func keyFileErrorsNameTheKeyFile() throws {
        let folder = TempFolder()
        try """
        {"description": "keys with a typo",
         "keys": [
           {"name": "a"},
           {"name": "b", "policy": "sometimes"}
         ]}
        """.write(toFile: folder.file("keys.json"), atomically: true, encoding: .utf8)
        try "{\"keys\": [\n 01]}".write(toFile: folder.file("broken.json"), atomically: true, encoding: .utf8)
        func load(_ keysFile: String) -> ScenarioError? {
            let text = "{\"description\": \"d\", \"seed\": 1,\n \"keysFile\": \"\(keysFile)\", \"timeline\": []}"
            do {
                _ = try Scenario.parse(text, file: folder.file("s.json"))
                return nil
            } catch {
                return error
            }
        }
        let typo = try #require(load("keys.json"))
        #expect(typo.file == folder.file("keys.json"))
        #expect(typo.field == "keys[1].policy")
        #expect(typo.line == 4)
        let broken = try #require(load("broken.json"))
        #expect(broken.file == folder.file("s.json"))
        #expect(broken.field == "keysFile")
        #expect(broken.line == 2)
        #expect(broken.message.hasPrefix("'broken.json' line 2 is not valid JSON"))
        let missing = try #require(load("missing.json"))
        #expect(missing.message.hasPrefix("cannot read the key registry 'missing.json'"))
    }

    /// `Scenario.json` (what `syncsim fuzz` writes) reads back to the same scenario.
    @Test func generatedScenariosRoundTrip() throws {
        for seed in UInt64(1)...20 {
            let scenario = ScenarioGenerator(ops: 80).scenario(seed: seed)
            #expect(try Scenario.parse(scenario.json) == scenario, "seed \(seed)")
        }
        let odd = try Scenario.parse(Self.scenarioText(value: #"{"z": [1.25, "\ud83d\ude00"], "a": {"b": null}}"#))
        #expect(try Scenario.parse(odd.json) == odd)
    }

    @Test(arguments: SimScenarioTests.scenarioNames)
    func fixturesRoundTrip(name: String) throws {
        let path = SimScenarioTests.path(name)
        let scenario = try Scenario.load(path: path)
        #expect(try Scenario.parse(scenario.json, file: path) == scenario)
    }
}

/// `syncsim inspect` reads store files through `SyncStore.inspect`.
@Suite struct SimInspectTests {
    @Test func keptStoresShowCheckpointsAndConflicts() async throws {
        let folder = TempFolder()
        var options = RunOptions()
        options.keepStoresIn = folder.path
        let outcome = await Simulation.run(path: SimScenarioTests.path("conflicts-and-deletes"), options: options)
        #expect(outcome.report?.passed == true)
        let phone = try StoreInspection(path: folder.file("phone-1001.sqlite"), includeValues: true)
        #expect(phone.role == "phone")
        #expect(phone.node == "1001")
        #expect(phone.checkpoints.map(\.node) == ["2002"])
        #expect(phone.checkpoints[0].ackedThrough > 0)
        #expect(!phone.conflicts.isEmpty)
        #expect(phone.entries.map(\.key) == phone.entries.map(\.key).sorted())
        #expect(phone.text.contains("conflicts (\(phone.conflicts.count)):"))
    }

    @Test func keptStoresOverTCP() async throws {
        let folder = TempFolder()
        var options = RunOptions()
        options.keepStoresIn = folder.path
        let outcome = await Simulation.run(path: SimScenarioTests.path("new-watch-epoch"), options: options, transport: .tcp)
        #expect(outcome.report?.passed == true, "\(outcome.report?.text ?? outcome.runError ?? "")")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".sqlite") }.sorted()
        #expect(files == ["phone-1001.sqlite", "watch-2002.sqlite", "watch-3003.sqlite"])
        let watch = try StoreInspection(path: folder.file("watch-3003.sqlite"), includeValues: false)
        #expect(watch.checkpoints.map(\.node) == ["1001"])
    }

    /// `--keep-stores` into a folder kept from an earlier run: a `-wal` or
    /// `-shm` left there by it must not end up beside this run's `.sqlite`
    /// (SQLite would read the old run's WAL into the new file).
    @Test func keptStoresLeaveNoStaleWALOfAnEarlierRun() async throws {
        let folder = TempFolder()
        for suffix in ["-wal", "-shm"] {
            try Data("stale".utf8).write(to: URL(fileURLWithPath: folder.file("phone-1001.sqlite" + suffix)))
        }
        var options = RunOptions()
        options.keepStoresIn = folder.path
        let outcome = await Simulation.run(path: SimScenarioTests.path("conflicts-and-deletes"), options: options)
        #expect(outcome.report?.passed == true)
        for suffix in ["-wal", "-shm"] {
            let left = FileManager.default.contents(atPath: folder.file("phone-1001.sqlite" + suffix))
            #expect(left != Data("stale".utf8), "the earlier run's \(suffix) is still beside the new store")
        }
        #expect(try StoreInspection(path: folder.file("phone-1001.sqlite"), includeValues: false).role == "phone")
    }

    @Test func notAStoreIsRefused() throws {
        let folder = TempFolder()
        try "plain text".write(toFile: folder.file("notes.txt"), atomically: true, encoding: .utf8)
        #expect(throws: SyncError.self) { try StoreInspection(path: folder.file("notes.txt"), includeValues: false) }
        #expect(throws: SyncError.self) { try StoreInspection(path: folder.file("absent.sqlite"), includeValues: false) }
    }
}

/// An unknown `op` listed the ops a step may take, without `requestManual`:
/// a user who misspelled it (`requestmanual`) was not shown the right spelling.
@Suite struct UnknownOpListsEveryOpTests {
    @Test func theListOfOpsHasEveryOpTheFormatTakes() throws {
        let text = #"{"description": "d", "seed": 1, "keys": [{"name": "a"}], "timeline": [{"at": 0, "op": "requestmanual", "node": "phone"}]}"#
        do {
            _ = try Scenario.parse(text, file: "t.json")
            Issue.record("an unknown op was accepted")
        } catch {
            #expect(error.field == "timeline[0].op")
            for op in ["put", "delete", "sync", "requestManual", "faults", "partition", "heal", "crash", "restart", "skew",
                       "checkpoint", "replaceWatch", "powerCut", "fillDisk", "freeDisk", "purge", "updateApp"] {
                #expect(error.message.contains(op), "\(op) missing from: \(error.message)")
            }
        }
    }
}

/// A put's `size` is the value's exact serialized size, as the scenario
/// format says: a size too small for a JSON key's quotes (2 bytes) or a
/// union key's `[""]` (4) was run with a larger value than it named.
@Suite struct PutSizeBelowItsWrapperTests {
    static func text(key: String, size: Int) -> String {
        """
        {"description": "d", "seed": 1,
         "keys": [{"name": "j"}, {"name": "u", "resolver": "union"}, {"name": "d", "encoding": "data"}],
         "timeline": [
           {"at": 0, "op": "put", "node": "phone", "key": "\(key)", "size": \(size)}]}
        """
    }

    @Test(arguments: [("j", 1, 2), ("u", 3, 4)])
    func aSizeBelowTheWrapperIsRefused(key: String, size: Int, least: Int) throws {
        do {
            _ = try Scenario.parse(Self.text(key: key, size: size), file: "s.json")
            Issue.record("size \(size) of \(key) was accepted")
        } catch {
            #expect(error.field == "timeline[0].size")
            #expect(error.line == 4)
            #expect(error.message.contains("at least \(least)"), "\(error.message)")
        }
    }

    @Test(arguments: [("j", 2), ("u", 4), ("d", 0), ("j", 100)])
    func theSmallestSizesAreExact(key: String, size: Int) throws {
        let scenario = try Scenario.parse(Self.text(key: key, size: size))
        let runner = try ScenarioRunner<SimulatedScenarioLink>(scenario: scenario)
        let descriptor = try #require(scenario.keys.first { $0.name == key })
        #expect(runner.valueBytes(descriptor: descriptor, value: nil, size: size).count == size)
    }
}

import Foundation
import SyncTransport
import Testing

/// `syncsim node`'s `put` took what Foundation's parser lets through:
/// `{"x":1,"x":2}` was stored as `{"x":2}` (one of the two dropped without a
/// word) and `[1,]` as `[1]`, while a scenario's `value` and a keys file
/// refuse both. The node refuses them too now, as `invalid-command`, and
/// stores nothing.
@Suite struct NodePutStrictJSONTests {
    @Test func aRepeatedMemberOrATrailingCommaIsRefused() async throws {
        let setup = try await ListeningPhoneNode(keys: #"{"keys":[{"name":"a"}]}"#)
        let phone = setup.phone
        defer { phone.stop() }
        phone.send(#"put a {"kept":true}"#)
        #expect(try await phone.reply("put")["ok"] as? Bool == true)
        let refused = [
            (#"{"x":1,"x":2}"#, "the field 'x' is given twice in one object"),
            (#"{"o":{"y":[1],"y":[2]}}"#, "the field 'y' is given twice in one object"),
            ("[1,]", "a comma before the end of an object or array"),
            (#"{"x":1,}"#, "a comma before the end of an object or array"),
        ]
        for (value, reason) in refused {
            phone.send("put a \(value)")
            let reply = try await phone.reply("put a \(value)")
            #expect(reply["ok"] as? Bool == false && reply["code"] as? String == "invalid-command", "\(value): \(reply)")
            #expect((reply["error"] as? String)?.contains(reason) == true, "\(value): \(reply)")
        }
        // Nothing of them was stored; a string holding such text is still a value like any other.
        phone.send("get a")
        #expect(try await phone.reply("get")["value"] as? [String: Bool] == ["kept": true])
        phone.send(#"put a "{\"x\":1,\"x\":2} [1,]""#)
        #expect(try await phone.reply("put of a string")["ok"] as? Bool == true)
    }

    /// `put a "\ud800"` was refused with Foundation's reason, "Unexpected end
    /// of file", for a value that ends where it should. The reason names the
    /// lone surrogate escape now; a pair is one character and is stored.
    @Test func aLoneSurrogateEscapeIsNamedAsTheReason() async throws {
        let setup = try await ListeningPhoneNode(keys: #"{"keys":[{"name":"a"}]}"#)
        let phone = setup.phone
        defer { phone.stop() }
        let refused = [
            (#""\ud800""#, #"\ud800"#),
            (#"{"x":"a\uD83Db"}"#, #"\uD83D"#),
            (#"["\udc00"]"#, #"\udc00"#),
            (#""\ud800\u0041""#, #"\ud800"#),
        ]
        for (value, escape) in refused {
            phone.send("put a \(value)")
            let reply = try await phone.reply("put a \(value)")
            #expect(reply["ok"] as? Bool == false && reply["code"] as? String == "invalid-command", "\(value): \(reply)")
            let error = reply["error"] as? String ?? ""
            #expect(error.contains("a lone UTF-16 surrogate \(escape) is not a character"), "\(value): \(reply)")
            #expect(!error.contains("end of file"), "\(value): \(reply)")
        }
        phone.send(#"put a "\ud83d\ude00""#)
        #expect(try await phone.reply("put of a pair")["ok"] as? Bool == true)
        phone.send("get a")
        #expect(try await phone.reply("get")["value"] as? String == "\u{1F600}")
    }
}

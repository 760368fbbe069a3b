import Foundation
@testable import SyncEngine
import Testing

/// A key whose full name is where a member of a declared family would be
/// (`a:b` beside the family `a`) was accepted: `a["b"]` then addressed that
/// key with the family's type and serializer. The registry refuses it now.
@Suite(.timeLimit(.minutes(2))) struct FamilyKeyCollisionTests {
    static func isCollision(_ error: any Error, naming names: [String]) -> Bool {
        guard let e = error as? SyncError, e.code == .duplicateKey else { return false }
        return names.allSatisfy { e.message.contains("'\($0)'") }
    }

    @Test(arguments: [false, true]) func aKeyInsideAFamilyIsRefused(keyFirst: Bool) {
        let family = KeyFamily<Int>("a", default: 0)
        let key = Key<String>("b", in: Namespace("a"), default: "")                  // a:b
        let deep = Key<String>("c", in: Namespace("a").child("b"), default: "")      // a:b:c, a["b:c"]
        for declared in [[family, key], [family, deep]] as [[any KeyDeclaration]] {
            let keys = keyFirst ? declared.reversed() : declared
            #expect { _ = try KeyRegistry(keys) } throws: { Self.isCollision($0, naming: ["a", declared[1].descriptor.name]) }
        }
    }

    /// A nested family and keys beside (not inside) a family stay legitimate.
    @Test func nestedFamiliesAndSiblingsAreAccepted() throws {
        let registry = try KeyRegistry([
            KeyFamily<Int>("a", default: 0), KeyFamily<Int>("hours", in: Namespace("a"), default: 0),
            Key<Int>("ab", default: 0), Key<Int>("a", in: Namespace("x"), default: 0), Key<Int>("b", default: 0),
        ])
        #expect(registry.descriptors.count == 5)
    }

    /// `syncsim node --keys` loads its file through the same check.
    @Test func aKeysFileWithACollisionIsRefused() throws {
        let folder = TempFolder()
        let path = folder.file("keys.json")
        try Data(#"{"keys":[{"name":"day","family":true,"type":"Int"},{"name":"day:total","type":"String"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect { _ = try KeyRegistry.load(jsonFile: path) } throws: { Self.isCollision($0, naming: ["day", "day:total"]) }
    }
}

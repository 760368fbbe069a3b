import Foundation
import SyncEngine

/// A member name of a scenario or registry file, as a coding key.
struct FieldKey: CodingKey, Hashable {
    var stringValue: String
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

/// A bad field: its coding path (which `JSONLocator` turns into a line) and what is wrong.
struct FieldError: Error {
    var codingPath: [any CodingKey]
    var message: String

    var field: String { FieldError.name(of: codingPath) }

    /// `timeline[3].node` for a coding path.
    static func name(of path: [any CodingKey]) -> String { JSONLocator.fieldName(of: path) }
}

/// One object of a scenario file, read field by field: each reader checks
/// the JSON type and range and fails with the field's coding path.
struct Fields {
    let container: KeyedDecodingContainer<FieldKey>

    init(_ container: KeyedDecodingContainer<FieldKey>) {
        self.container = container
    }

    /// The object `decoder` is at; anything else fails with its type.
    init(_ decoder: any Decoder) throws {
        do {
            container = try decoder.container(keyedBy: FieldKey.self)
        } catch is DecodingError {
            let found = try decoder.singleValueContainer().decode(JSONValue.self)
            throw FieldError(codingPath: decoder.codingPath, message: "expected an object, found \(found.typeName)")
        }
    }

    func fail(_ name: String, _ message: String) -> FieldError {
        FieldError(codingPath: container.codingPath + [FieldKey(name)], message: message)
    }

    func has(_ name: String) -> Bool { container.contains(FieldKey(name)) }

    /// The member's value, whatever it is (`null` included); nil when absent.
    func value(_ name: String) throws -> JSONValue? {
        guard has(name) else { return nil }
        return try container.decode(JSONValue.self, forKey: FieldKey(name))
    }

    /// Refuses members not in `allowed`, naming the ones that are.
    func checkKnown(_ allowed: [String]) throws {
        let unknown = container.allKeys.map(\.stringValue).filter { !allowed.contains($0) }
        if let first = unknown.min(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            throw fail(first, "unknown field; expected one of \(allowed.sorted().joined(separator: ", "))")
        }
    }

    func string(_ name: String, required: Bool = true) throws -> String? {
        guard let value = try value(name) else {
            if required { throw fail(name, "is required") }
            return nil
        }
        guard case .string(let text) = value else { throw fail(name, "expected a string, found \(value.typeName)") }
        return text
    }

    func integer(_ name: String, required: Bool = true, range: ClosedRange<Int64>? = nil) throws -> Int64? {
        guard let value = try value(name) else {
            if required { throw fail(name, "is required") }
            return nil
        }
        guard case .integer(let number) = value else {
            // A whole number past Int64 (`1e20`, `99999999999999999999`) decodes as a double: out of range, not a fraction.
            if case .number(let double) = value, double.isFinite, double == double.rounded(), Int64(exactly: double) == nil {
                let range = range ?? Int64.min...Int64.max
                throw fail(name, "is out of range: must be in \(range.lowerBound)...\(range.upperBound)")
            }
            throw fail(name, "expected a whole number, found \(value.typeName == "a number" ? "a fraction" : value.typeName)")
        }
        if let range, !range.contains(number) { throw fail(name, "must be in \(range.lowerBound)...\(range.upperBound)") }
        return number
    }

    func double(_ name: String, range: ClosedRange<Double>) throws -> Double? {
        guard let value = try value(name) else { return nil }
        let number: Double
        switch value {
        case .integer(let whole): number = Double(whole)
        case .number(let fraction): number = fraction
        default: throw fail(name, "expected a number, found \(value.typeName)")
        }
        guard range.contains(number) else { throw fail(name, "must be in \(range.lowerBound)...\(range.upperBound)") }
        return number
    }

    func bool(_ name: String) throws -> Bool? {
        guard let value = try value(name) else { return nil }
        guard case .bool(let flag) = value else { throw fail(name, "expected true or false") }
        return flag
    }

    /// The object member `name`; nil when absent.
    func object(_ name: String) throws -> Fields? {
        guard has(name) else { return nil }
        do {
            return Fields(try container.nestedContainer(keyedBy: FieldKey.self, forKey: FieldKey(name)))
        } catch is DecodingError {
            throw fail(name, "expected an object, found \(try value(name)?.typeName ?? "nothing")")
        }
    }

    /// The elements of array member `name`, each as a decoder (its coding path
    /// ends in its index); nil when absent. `of` names the elements in errors.
    func elements(_ name: String, of what: String) throws -> [any Decoder]? {
        guard has(name) else { return nil }
        var items: any UnkeyedDecodingContainer
        do {
            items = try container.nestedUnkeyedContainer(forKey: FieldKey(name))
        } catch is DecodingError {
            throw fail(name, "expected an array of \(what), found \(try value(name)?.typeName ?? "nothing")")
        }
        var decoders: [any Decoder] = []
        while !items.isAtEnd { decoders.append(try items.superDecoder()) }
        return decoders
    }
}

import Foundation

/// Turns a key's typed value into bytes and back. JSON by default.
public struct ValueSerializer<Value: Sendable>: Sendable {
    /// A stable identifier stored with every value and compared at handshake.
    public let identifier: String
    private let encodeBody: @Sendable (Value) throws -> [UInt8]
    private let decodeBody: @Sendable ([UInt8]) throws -> Value

    /// A custom serializer. `identifier` must differ from the built-in ones.
    public init(identifier: String, encode: @escaping @Sendable (Value) throws -> [UInt8], decode: @escaping @Sendable ([UInt8]) throws -> Value) {
        self.identifier = identifier
        self.encodeBody = encode
        self.decodeBody = decode
    }

    public func encode(_ value: Value) throws -> [UInt8] {
        do { return try encodeBody(value) } catch let error as SyncError { throw error } catch {
            throw SyncError(.encodingFailed, "cannot encode a \(Value.self) with the \(identifier) serializer: \(type(of: error))")
        }
    }

    public func decode(_ bytes: [UInt8]) throws -> Value {
        do { return try decodeBody(bytes) } catch let error as SyncError { throw error } catch {
            throw SyncError(.typeMismatch, "the stored bytes do not decode as \(Value.self) with the \(identifier) serializer; was the key's type or serializer changed?")
        }
    }
}

extension ValueSerializer where Value: Codable {
    /// JSON (the default).
    public static var json: ValueSerializer<Value> {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let decoder = JSONDecoder()
        return ValueSerializer(identifier: "json", encode: { value in
            [UInt8](try encoder.encode(value))
        }, decode: { bytes in
            try decoder.decode(Value.self, from: Data(bytes))
        })
    }

    /// Binary property list.
    public static var binaryPropertyList: ValueSerializer<Value> {
        ValueSerializer(identifier: "plist", encode: { value in
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            return [UInt8](try encoder.encode([value]))
        }, decode: { bytes in
            guard let first = try PropertyListDecoder().decode([Value].self, from: Data(bytes)).first else {
                throw SyncError(.typeMismatch, "empty property list")
            }
            return first
        })
    }
}

extension ValueSerializer where Value == Data {
    /// The bytes themselves.
    public static var data: ValueSerializer<Data> {
        ValueSerializer(identifier: "data", encode: { [UInt8]($0) }, decode: { Data($0) })
    }
}

extension ValueSerializer where Value == [UInt8] {
    /// The bytes themselves.
    public static var bytes: ValueSerializer<[UInt8]> {
        ValueSerializer(identifier: "data", encode: { $0 }, decode: { $0 })
    }
}

extension ValueSerializer where Value == String {
    /// UTF-8 text.
    public static var string: ValueSerializer<String> {
        ValueSerializer(identifier: "string", encode: { Array($0.utf8) }, decode: { bytes in
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw SyncError(.typeMismatch, "the stored bytes are not UTF-8 text")
            }
            return text
        })
    }
}

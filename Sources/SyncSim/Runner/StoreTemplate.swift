import SyncEngine

/// The store template of this process (`StoreFileTemplate`), made once: a
/// simulated device's new store starts as a copy of it, so scenarios do not
/// each pay for creating the schema (its DDL was about 17 % of `syncsim fuzz`).
enum StoreTemplate {
    /// Nil if it could not be made (stores are then created as usual).
    static let shared: StoreFileTemplate? = try? StoreFileTemplate()

    /// Writes a copy of the template at `path` unless a file is already there.
    static func install(at path: String) {
        shared?.install(at: path)
    }
}

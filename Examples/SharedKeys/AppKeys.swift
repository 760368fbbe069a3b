import SyncEngine

/// The keys both apps declare: shared source, compiled into each.
public enum AppKeys {
    static let health = Namespace("health")
    public static let steps = Key<Int>("steps", in: health, default: 0, availability: .all, policy: .automaticSmall)
    public static let workouts = Key<[String]>("workouts", in: health, default: [], resolver: .union())
    public static let units = Key<String>("units", default: "metric", availability: .phoneWithWatchSync)
    public static let profile = Key<String>("profile", default: "", policy: .manual)
    public static let token = Key<String>("token", default: "", availability: .phoneOnly, security: .encrypted)
    public static let all: [any KeyDeclaration] = [steps, workouts, units, profile, token]

    /// Opens this device's store in `folder` (a store restored from a backup,
    /// or copied from another device, takes a new node id at open).
    public static func openStore(role: DeviceRole, folder: String) throws -> SyncStore {
        var options = StoreOptions(encryption: .keyFile(path: "\(folder)/\(role).key"))
        options.renewsNodeIDWhenRestored = true
        return try SyncStore(path: "\(folder)/\(role).sqlite", role: role, registry: try KeyRegistry(all), options: options)
    }
}

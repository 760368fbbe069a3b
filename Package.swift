// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "SyncEngine",
    // Synchronization (Mutex, Atomic) sets the floor: iOS 18, watchOS 11,
    // macOS 15; Observation (iOS 17) is below it. Built and tested on Linux only.
    platforms: [.iOS(.v18), .watchOS(.v11), .macOS(.v15)],
    products: [
        .library(name: "SyncTransport", targets: ["SyncTransport"]),
        .library(name: "SyncEngine", targets: ["SyncEngine"]),
        .library(name: "SyncSim", targets: ["SyncSim"]),
        .executable(name: "syncsim", targets: ["syncsim"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // `swift package generate-documentation` (the DocC catalog in Sources/SyncEngine/SyncEngine.docc).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]
        ),
        // libdeflate: frames are deflated with it on Linux (the same zlib format, faster than
        // zlib at a smaller size); elsewhere with zlib.
        .systemLibrary(
            name: "CLibdeflate",
            pkgConfig: "libdeflate",
            providers: [.apt(["libdeflate-dev"]), .brew(["libdeflate"])]
        ),
        // The C library's heap statistics (glibc's mallinfo2, Darwin's mstats), for benchmarks.
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        // A SQLite VFS that simulates power loss (unsynced writes dropped), for tests and the simulator.
        .target(name: "CCrashVFS", dependencies: ["CSQLite"]),
        // A grown WAL file cut back in steps (the background checkpointer's idle trim).
        .target(name: "CWALTrim", dependencies: ["CSQLite"]),
        // SQLite's process-wide allocation statistics off at load (a mutex every connection's allocations took).
        .target(name: "CSQLiteSetup", dependencies: ["CSQLite"]),
        .target(
            name: "SyncTransport",
            dependencies: [
                "CZlib",
                .target(name: "CLibdeflate", condition: .when(platforms: [.linux])),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "SyncEngine",
            dependencies: [
                "CSQLite",
                "CCrashVFS",
                "CWALTrim",
                "CSQLiteSetup",
                "SyncTransport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "SyncSim",
            dependencies: [
                "SyncEngine",
                "SyncTransport",
                "CZlib",
                "CMalloc",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "syncsim",
            dependencies: [
                "SyncSim",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // A tiny phone program and a tiny watch program embedding the library with shared keys.
        .target(name: "SharedKeys", dependencies: ["SyncEngine"], path: "Examples/SharedKeys"),
        .executableTarget(name: "PhoneApp", dependencies: ["SharedKeys", "SyncEngine", "SyncTransport"], path: "Examples/PhoneApp"),
        .executableTarget(name: "WatchApp", dependencies: ["SharedKeys", "SyncEngine", "SyncTransport"], path: "Examples/WatchApp"),
        // Wait helpers with deadlines, shared by the test targets.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        // Bounds a plain `swift test` to four tests per core, as `scripts/test` does.
        .target(name: "CTestParallelism", path: "Tests/CTestParallelism"),
        .testTarget(
            name: "SyncTransportTests",
            dependencies: [
                "SyncTransport",
                "TestSupport",
                "CTestParallelism",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "SyncEngineTests",
            dependencies: [
                "SyncEngine",
                "TestSupport",
                "CTestParallelism",
                "SyncTransport",
                "SyncSim",
                "CSQLite",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

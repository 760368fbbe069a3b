// swift-tools-version: 6.1
// Micro benchmarks (ordo-one/benchmark) for SyncEngine. A package of its own
// so that the root package does not depend on the benchmark framework:
//   cd Benchmarks && swift package benchmark
//   cd Benchmarks && swift package benchmark thresholds check
import Foundation
import PackageDescription

/// A path dependency's identity is its folder's name (the clone's name, which
/// differs between checkouts), so it is read from where this manifest lives.
let rootPackage = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "SyncEngineBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "SyncEngineBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "SyncEngine", package: rootPackage),
                .product(name: "SyncTransport", package: rootPackage),
            ],
            path: "Benchmarks/SyncEngineBenchmarks",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

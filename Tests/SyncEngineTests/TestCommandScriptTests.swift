import Foundation
import Testing

/// `scripts/test`, the test command README and `.ci/run` give, run against a
/// fake toolchain (a `swift` that prints what it was given, beside a
/// `libTesting.so`): it bounds Swift Testing's width, passes its arguments
/// on, and warns when the toolchain's Swift Testing does not read the
/// variable that bounds it (the tests would run unbounded without a word).
@Suite struct TestCommandScriptTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/test").path

    /// Runs `scripts/test --filter X` with a fake toolchain first on `PATH`
    /// whose Swift Testing library holds `libraryText`; its exit status, stdout and stderr.
    private func run(libraryText: String) async throws -> (status: Int32, output: String, errors: String) {
        let folder = TempFolder()
        let bin = folder.file("usr/bin")
        let library = folder.file("usr/lib/swift/linux")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: library, withIntermediateDirectories: true)
        try Data(libraryText.utf8).write(to: URL(fileURLWithPath: library + "/libTesting.so"))
        let swift = bin + "/swift"
        try Data("#!/bin/sh\necho \"fake swift: $* width=$SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH\"\n".utf8)
            .write(to: URL(fileURLWithPath: swift))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: swift)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [Self.script, "--filter", "X"]
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = bin + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"] = "3"
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let status = try await exitStatus(of: process, "scripts/test to exit")
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let warned = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return (status, printed, warned)
    }

    @Test func aToolchainThatReadsTheWidthRunsBoundedWithoutAWarning() async throws {
        let result = try await run(libraryText: "…SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH…")
        #expect(result.status == 0)
        #expect(result.output.contains("at most 3 tests at once"), "\(result.output)")
        #expect(result.output.contains("fake swift: test --filter X width=3"), "\(result.output)")
        #expect(result.errors.isEmpty, "\(result.errors)")
    }

    @Test func aToolchainThatDoesNotReadTheWidthIsNamedInAWarning() async throws {
        let result = try await run(libraryText: "SWT_EXPERIMENTAL_MAXIMUM_WIDTH_RENAMED")
        #expect(result.status == 0)
        #expect(result.output.contains("fake swift: test --filter X width=3"), "\(result.output)")
        #expect(result.errors.contains("does not read SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"), "\(result.errors)")
        #expect(result.errors.contains("libTesting.so"), "\(result.errors)")
    }
}

import CamRigLocalRig
import Foundation

/// Finds and runs the package's executables (`camrig`, `camrig-agent`) from tests.
public enum Executables {
    /// The build's products directory: where the test bundle itself lives, unless `CAMRIG_BIN_DIR` says otherwise.
    public static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["CAMRIG_BIN_DIR"] {
            return URL(fileURLWithPath: override)
        }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        // On Darwin the test runner lives inside the .xctest bundle.
        while url.pathComponents.count > 1 && !FileManager.default.fileExists(atPath: url.appendingPathComponent("camrig").path) {
            let parent = url.deletingLastPathComponent()
            if parent == url { break }
            url = parent
        }
        return url
    }

    /// The package's executable `name` in `directory`.
    public static func url(_ name: String) -> URL {
        directory.appendingPathComponent(name)
    }

    /// The outcome of running a command to completion.
    public typealias Result = ToolRunner.Result

    /// Runs the package's executable `name` with `arguments`, waiting at most `timeout` seconds (then kills
    /// it). The calling thread blocks: from async code, `await` the async overload.
    @available(*, noasync, message: "blocks a thread of the cooperative pool while the program runs: use `try await Executables.run`")
    public static func run(_ name: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        try ToolRunner.run(url(name).path, arguments, timeout: timeout)
    }

    /// `run` on a thread of its own: the caller's executor is not held while the program runs.
    public static func run(_ name: String, _ arguments: [String], timeout: Double = 60) async throws -> Result {
        try await ToolRunner.run(url(name).path, arguments, timeout: timeout)
    }

    /// Runs any program by path, like `run`.
    @available(*, noasync, message: "blocks a thread of the cooperative pool while the program runs: use `try await Executables.runTool`")
    public static func runTool(_ path: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        try ToolRunner.run(path, arguments, timeout: timeout)
    }

    /// `runTool` on a thread of its own.
    public static func runTool(_ path: String, _ arguments: [String], timeout: Double = 60) async throws -> Result {
        try await ToolRunner.run(path, arguments, timeout: timeout)
    }
}

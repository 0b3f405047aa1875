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

    public static func url(_ name: String) -> URL {
        directory.appendingPathComponent(name)
    }

    /// The outcome of running a command to completion.
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs the package's executable `name` with `arguments`, waiting at most `timeout` seconds (then kills it).
    public static func run(_ name: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        try runTool(url(name).path, arguments, timeout: timeout)
    }

    /// Runs any program by path, like `run`.
    public static func runTool(_ path: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Read both pipes while the process runs so a chatty child never blocks on a full pipe.
        let outData = LockedData()
        let errData = LockedData()
        let readers = DispatchGroup()
        for (pipe, sink) in [(output, outData), (errors, errData)] {
            readers.enter()
            DispatchQueue.global().async {
                sink.set(pipe.fileHandleForReading.readDataToEndOfFile())
                readers.leave()
            }
        }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        readers.wait()
        return Result(
            status: process.terminationStatus,
            stdout: String(decoding: outData.get(), as: UTF8.self),
            stderr: String(decoding: errData.get(), as: UTF8.self)
        )
    }
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ value: Data) { lock.lock(); data = value; lock.unlock() }
    func get() -> Data { lock.lock(); defer { lock.unlock() }; return data }
}

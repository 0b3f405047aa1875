import Foundation
import NIOConcurrencyHelpers

/// Runs a program to completion and collects what it printed (the multi-host harness runs `ip` with it).
public enum ToolRunner {
    /// The outcome of running a command to completion.
    public struct Result: Sendable {
        /// The exit status (or the signal number, when a signal ended it).
        public var status: Int32
        /// Everything it wrote to standard output.
        public var stdout: String
        /// Everything it wrote to standard error.
        public var stderr: String
    }

    /// Runs the program at `path` with `arguments` (and `environment`, nil for this process's), waiting at
    /// most `timeout` seconds (then kills it). The calling thread blocks: call it off the cooperative pool,
    /// or from async code through `run(_:_:environment:timeout:) async`.
    @available(*, noasync, message: "blocks a thread of the cooperative pool while the program runs: use `try await ToolRunner.run`")
    public static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> Result {
        let output = Pipe()
        let errors = Pipe()
        let process = try ChildProcess.spawn(
            path, arguments, environment: environment, stdout: .descriptor(output.fileHandleForWriting.fileDescriptor),
            stderr: .descriptor(errors.fileHandleForWriting.fileDescriptor)
        )
        try? output.fileHandleForWriting.close()
        try? errors.fileHandleForWriting.close()
        // Read both pipes while the process runs so a chatty child never blocks on a full pipe.
        let outData = NIOLockedValueBox(Data())
        let errData = NIOLockedValueBox(Data())
        let readers = DispatchGroup()
        for (pipe, sink) in [(output, outData), (errors, errData)] {
            readers.enter()
            DispatchQueue.global().async {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                sink.withLockedValue { $0 = data }
                readers.leave()
            }
        }
        let termination = process.reapBlocking(grace: .milliseconds(Int64(timeout * 1000)))
        readers.wait()
        return Result(
            status: termination.status,
            stdout: String(decoding: outData.withLockedValue { $0 }, as: UTF8.self),
            stderr: String(decoding: errData.withLockedValue { $0 }, as: UTF8.self)
        )
    }

    /// `run` on a thread of its own: the caller's executor is not held while the program runs.
    public static func run(
        _ path: String, _ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60
    ) async throws -> Result {
        try await onDedicatedThread("run \(URL(fileURLWithPath: path).lastPathComponent)") {
            try run(path, arguments, environment: environment, timeout: timeout)
        }
    }

    /// `NAME=VALUE` lines (what a script prints for `eval`, or writes to an env file) as a dictionary;
    /// other lines are left out.
    public static func environment(fromLines text: String) -> [String: String] {
        var environment: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { environment[String(parts[0])] = String(parts[1]) }
        }
        return environment
    }
}

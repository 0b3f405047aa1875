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

    /// Runs the program at `path` with `arguments`, waiting at most `timeout` seconds (then kills it).
    public static func run(_ path: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
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
        process.reapBlocking(grace: .milliseconds(Int64(timeout * 1000)))
        readers.wait()
        return Result(
            status: process.terminationStatus,
            stdout: String(decoding: outData.withLockedValue { $0 }, as: UTF8.self),
            stderr: String(decoding: errData.withLockedValue { $0 }, as: UTF8.self)
        )
    }
}

import Foundation
import NIOConcurrencyHelpers

/// A `camrig-agent` process started on this host (by `camrig demo` and the benchmarks): started with
/// `--listen 127.0.0.1:0`, ready once it prints `listening HOST:PORT`.
public final class LocalAgentProcess: @unchecked Sendable {
    public let endpoint: AgentEndpoint
    public let process: Process
    /// Where the agent's standard error goes.
    public let logFile: URL

    private init(endpoint: AgentEndpoint, process: Process, logFile: URL) {
        self.endpoint = endpoint
        self.process = process
        self.logFile = logFile
    }

    /// The `camrig-agent` executable: `$CAMRIG_AGENT`, else next to this executable, else on `PATH`.
    public static func executable() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["CAMRIG_AGENT"] { return URL(fileURLWithPath: path) }
        let own = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let sibling = own.appendingPathComponent("camrig-agent")
        if FileManager.default.isExecutableFile(atPath: sibling.path) { return sibling }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("camrig-agent")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw AgentClientError(.connectFailed, agent: "local", "cannot find camrig-agent next to this program or on PATH; build it (`swift build`) or set CAMRIG_AGENT")
    }

    /// Starts the agent with `arguments` (which must include `--listen 127.0.0.1:0`); its log goes to `logFile`.
    public static func start(executable: URL? = nil, arguments: [String], logFile: URL, timeout: Duration = .seconds(20)) throws -> LocalAgentProcess {
        let process = Process()
        process.executableURL = try executable ?? Self.executable()
        process.arguments = arguments
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: logFile)
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        // The first line on standard output, read off the caller's thread so a silent agent cannot block past the timeout.
        let reader = output.fileHandleForReading
        let firstLine = NIOLockedValueBox(Data())
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var buffer = Data()
            while !buffer.contains(UInt8(ascii: "\n")) {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
            }
            firstLine.withLockedValue { $0 = buffer }
            done.signal()
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let log = { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }
        guard done.wait(timeout: .now() + seconds) == .success else {
            process.terminate()
            throw AgentClientError(.timeout, agent: "local", "camrig-agent did not report 'listening' within \(seconds) s; log:\n\(log().suffix(2000))")
        }
        let line = String(decoding: firstLine.withLockedValue { $0 }, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard line.hasPrefix("listening "), let endpoint = AgentEndpoint(String(line.dropFirst("listening ".count))) else {
            process.waitUntilExit()
            throw AgentClientError(.connectFailed, agent: "local", "camrig-agent exited (status \(process.terminationStatus)) without listening; output '\(line)'; log:\n\(log().suffix(2000))")
        }
        return LocalAgentProcess(endpoint: endpoint, process: process, logFile: logFile)
    }

    /// The agent's log so far.
    public func log() -> String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    public var isRunning: Bool { process.isRunning }

    /// SIGKILL: a crash, with no chance to clean up.
    public func crash() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// SIGTERM, then wait (SIGKILL after `timeout` seconds). Returns the exit status.
    @discardableResult
    public func stop(timeout: Double = 10) -> Int32 {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationStatus
    }
}

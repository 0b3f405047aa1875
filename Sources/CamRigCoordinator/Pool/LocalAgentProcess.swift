import Foundation

/// A `camrig-agent` process started on this host (by `camrig demo` and the benchmarks): started with
/// `--listen 127.0.0.1:0`, ready once it prints `listening HOST:PORT`.
public final class LocalAgentProcess: @unchecked Sendable {
    public let endpoint: AgentEndpoint
    private let process: Process
    private let logFile: URL

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
    public static func start(arguments: [String], logFile: URL, timeout: Duration = .seconds(20)) throws -> LocalAgentProcess {
        let process = Process()
        process.executableURL = try executable()
        process.arguments = arguments
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: logFile)
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let deadline = ContinuousClock.now + timeout
        var buffer = Data()
        let reader = output.fileHandleForReading
        while !buffer.contains(UInt8(ascii: "\n")) {
            guard ContinuousClock.now < deadline else {
                process.terminate()
                throw AgentClientError(.timeout, agent: "local", "camrig-agent did not start listening; its log: \(logFile.path)")
            }
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            buffer.append(chunk)
        }
        let line = String(decoding: buffer, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard line.hasPrefix("listening "), let endpoint = AgentEndpoint(String(line.dropFirst("listening ".count))) else {
            process.terminate()
            let log = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
            throw AgentClientError(.connectFailed, agent: "local", "camrig-agent exited without listening: \(log.suffix(1000))")
        }
        return LocalAgentProcess(endpoint: endpoint, process: process, logFile: logFile)
    }

    /// The agent's log so far.
    public func log() -> String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    /// Stops the agent gracefully (SIGTERM) and waits for it.
    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }
}

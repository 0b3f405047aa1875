import CamRigCoordinator
import CamRigSecurity
import Foundation

/// A real `camrig-agent` process on loopback, started on a free port.
///
/// Its log (standard error) goes to a file that `log()` reads; `stop()` sends SIGTERM and waits.
public final class AgentProcess: @unchecked Sendable {
    public let process: Process
    public let host: String
    public let port: Int
    public let logFile: URL
    /// The private spool this process was given, when the test did not name one.
    private let ownSpool: URL?

    /// `host:port`, as `camrig --agent` takes it.
    public var address: String { "\(host):\(port)" }

    /// Starts the agent with `arguments` plus `--listen 127.0.0.1:0` and waits for its `listening` line.
    /// Unless `arguments` name a `--spool-dir` or a `--config`, the agent gets a temporary spool of its own, removed with it.
    public init(_ arguments: [String], startupTimeout: Double = 20) throws {
        logFile = URL(fileURLWithPath: NSTemporaryDirectory() + "camrig-agent-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        process = Process()
        process.executableURL = Executables.url("camrig-agent")
        var arguments = arguments
        // A test that names the spool, or passes a configuration file that may, keeps its choice.
        if arguments.contains("--spool-dir") || arguments.contains("--config") {
            ownSpool = nil
        } else {
            let spool = URL(fileURLWithPath: NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)")
            arguments += ["--spool-dir", spool.path]
            ownSpool = spool
        }
        process.arguments = ["--listen", "127.0.0.1:0"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: logFile)
        try process.run()

        let reader = output.fileHandleForReading
        let line = LockedData()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var buffer = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                if buffer.contains(UInt8(ascii: "\n")) { break }
            }
            line.set(buffer)
            done.signal()
        }
        guard done.wait(timeout: .now() + startupTimeout) == .success else {
            process.terminate()
            throw AgentProcessError("agent did not report 'listening' within \(startupTimeout) s; log:\n\(Self.read(logFile))")
        }
        let text = String(decoding: line.get(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("listening "), let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]) else {
            process.waitUntilExit()
            throw AgentProcessError("agent exited (status \(process.terminationStatus)) without listening; output '\(text)'; log:\n\(Self.read(logFile))")
        }
        self.host = "127.0.0.1"
        self.port = port
    }

    /// The agent's log so far.
    public func log() -> String { Self.read(logFile) }

    /// Resident memory in KiB (from /proc), or nil if the process is gone.
    public var residentKilobytes: Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }

    public var isRunning: Bool { process.isRunning }

    /// SIGKILL: a crash, with no chance to clean up.
    public func crash() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// SIGTERM, then wait (SIGKILL after `timeout`). Returns the exit status.
    @discardableResult
    public func stop(timeout: Double = 10) -> Int32 {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: logFile)
        if let ownSpool { try? FileManager.default.removeItem(at: ownSpool) }
    }

    static func read(_ url: URL) -> String {
        (try? String(contentsOf: url, encoding: .utf8)) ?? ""
    }
}

public struct AgentProcessError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

extension AgentProcess {
    /// Connects to this agent over TLS with certificate `identity` from `pki`.
    public func connect(_ pki: TestPKI, as identity: String = "coordinator") async throws -> AgentClient {
        try await AgentClient.connect(
            to: AgentEndpoint(host: host, port: port),
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: identity))
        )
    }
}

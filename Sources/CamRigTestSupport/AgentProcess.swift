import CamRigCoordinator
import CamRigSecurity
import Foundation

/// A real `camrig-agent` process on loopback, started on a free port.
///
/// Its log (standard error) goes to a file that `log()` reads; `stop()` sends SIGTERM and waits.
public final class AgentProcess: @unchecked Sendable {
    public let process: Process
    private let local: LocalAgentProcess
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
        var arguments = arguments
        // A test that names the spool, or passes a configuration file that may, keeps its choice.
        if arguments.contains("--spool-dir") || arguments.contains("--config") {
            ownSpool = nil
        } else {
            let spool = URL(fileURLWithPath: NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)")
            arguments += ["--spool-dir", spool.path]
            ownSpool = spool
        }
        do {
            local = try LocalAgentProcess.start(
                executable: Executables.url("camrig-agent"),
                arguments: ["--listen", "127.0.0.1:0"] + arguments,
                logFile: logFile,
                timeout: .milliseconds(Int64(startupTimeout * 1000))
            )
        } catch let error as AgentClientError {
            throw AgentProcessError(error.message)
        }
        process = local.process
        host = "127.0.0.1"
        port = local.endpoint.port
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
    public func crash() { local.crash() }

    /// SIGTERM, then wait (SIGKILL after `timeout`). Returns the exit status.
    @discardableResult
    public func stop(timeout: Double = 10) -> Int32 { local.stop(timeout: timeout) }

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

import CamRigWire
import CamRigLocalRig
import CamRigCoordinator
import Foundation
import NIOConcurrencyHelpers

/// A real `camrig-agent` process on loopback, started on a free port.
///
/// Its log (standard error) goes to a file that `log()` reads. Nothing here blocks a thread: `start` and `stop`
/// await the process, and `terminate()` (for a `defer`) leaves the waiting to the process's own thread.
public final class AgentProcess: @unchecked Sendable {
    /// The child process.
    public let process: ChildProcess
    private let local: LocalAgentProcess
    /// Where it listens: 127.0.0.1…
    public let host: String
    /// …and the port it chose.
    public let port: Int
    /// Where its standard error goes (removed with it).
    public let logFile: URL
    /// The private spool this process was given, when the test did not name one.
    private let ownSpool: URL?

    /// `host:port`, as `camrig --agent` takes it.
    public var address: String { "\(host):\(port)" }

    /// Starts the agent with `arguments` plus `--listen 127.0.0.1:0` and waits, without holding a thread, for its
    /// `listening` line. Unless `arguments` name a `--spool-dir` or a `--config`, the agent gets a temporary spool
    /// of its own, removed with it.
    /// - Parameter launcher: a program that runs the agent, and its arguments before the agent's path (the
    ///   libcamera tests start an agent built in the Debian 13 root through `scripts/in-libcamera-root`);
    ///   `agent` is then that agent's path.
    public static func start(
        _ arguments: [String], startupTimeout: Double = 20, launcher: (program: URL, arguments: [String], agent: URL)? = nil
    ) async throws -> AgentProcess {
        let logFile = URL(fileURLWithPath: NSTemporaryDirectory() + "camrig-agent-\(UUID().uuidString).log")
        var arguments = arguments
        // A test that names the spool, or passes a configuration file that may, keeps its choice.
        var ownSpool: URL?
        if !(arguments.contains("--spool-dir") || arguments.contains("--config")) {
            let spool = URL(fileURLWithPath: NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)")
            arguments += ["--spool-dir", spool.path]
            ownSpool = spool
        }
        // An agent a test let go of may still be shutting down: it is waited for, not raced.
        await exiting.drain()
        do {
            let agentArguments = ["--listen", "127.0.0.1:0"] + arguments
            let local = try await LocalAgentProcess.start(
                executable: launcher?.program ?? Executables.url("camrig-agent"),
                arguments: launcher.map { $0.arguments + [$0.agent.path] + agentArguments } ?? agentArguments,
                logFile: logFile,
                timeout: .milliseconds(Int64(startupTimeout * 1000))
            )
            return AgentProcess(local: local, logFile: logFile, ownSpool: ownSpool)
        } catch let error as LocalAgentError {
            throw AgentProcessError(error.message)
        }
    }

    private init(local: LocalAgentProcess, logFile: URL, ownSpool: URL?) {
        self.local = local
        self.logFile = logFile
        self.ownSpool = ownSpool
        process = local.process
        host = "127.0.0.1"
        port = local.endpoint.port
    }

    /// The agent's log so far.
    public func log() -> String { local.log() }

    /// Resident memory in KiB (from /proc), or nil if the process is gone.
    public var residentKilobytes: Int? { local.residentKilobytes }

    /// Whether the process is still running.
    public var isRunning: Bool { process.isRunning }

    /// SIGKILL: a crash, with no chance to clean up.
    public func crash() async {
        process.send(SIGKILL)
        await process.exit()
    }

    /// SIGTERM, then waits without holding a thread (SIGKILL after `timeout`). Returns the exit status.
    @discardableResult
    public func stop(timeout: Double = 10) async -> Int32 {
        await local.stop(timeout: .milliseconds(Int64(timeout * 1000)))
    }

    /// SIGTERM and return at once, for a test's `defer`: the process is reaped by a task of its own (SIGKILL
    /// after ten seconds), then its log, its private spool and `removing` (folders the test named for it, say)
    /// are removed. The next `start` waits until every agent terminated before it has exited, so that a test
    /// never shares the machine with an agent still shutting down. Only the first call counts.
    public func terminate(removing: [URL] = []) {
        let (local, logFile, ownSpool) = (local, logFile, ownSpool)
        let first = terminated.withLockedValue { terminated in
            defer { terminated = true }
            return !terminated
        }
        guard first else { return }
        local.process.terminate()
        // A task of its own, detached: `terminate` is called from a `defer` and from `deinit`, neither of
        // which can await, and the waiting must not hold the caller's thread.
        Self.exiting.add(
            Task.detached {
                await local.stop(timeout: .seconds(10))
                for url in [logFile] + (ownSpool.map { [$0] } ?? []) + removing { try? FileManager.default.removeItem(at: url) }
            })
    }

    /// Whether `terminate` ran: a test's `defer` and `deinit` both call it, possibly on different threads,
    /// and the reaping task must start once.
    private let terminated = NIOLockedValueBox(false)

    deinit {
        // Whatever the test did, the agent ends, and its files go once it has.
        terminate()
    }

    /// Agents terminated and not yet exited.
    private static let exiting = Exiting()

    /// The one list of agents on their way out, shared by every test in the process (any of them may start
    /// the next agent), hence a lock rather than an owner task: `drain` must see it at once.
    private final class Exiting: Sendable {
        private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])

        func add(_ task: Task<Void, Never>) { tasks.withLockedValue { $0.append(task) } }

        /// Waits until every agent terminated so far has exited (each within its ten seconds).
        func drain() async {
            while let next = tasks.withLockedValue({ $0.isEmpty ? nil : $0.removeFirst() }) { await next.value }
        }
    }
}

/// Why a test's agent did not start: what it printed and the tail of its log.
public struct AgentProcessError: Error, CustomStringConvertible {
    /// Why, with the agent's output and log.
    public var description: String
    init(_ description: String) { self.description = description }
}

extension AgentProcess {
    /// Connects to this agent over TLS with certificate `identity` from `pki`.
    public func connect(_ pki: TestPKI, as identity: String = "coordinator", maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength) async throws -> AgentClient {
        try await AgentClient.connect(
            to: AgentEndpoint(host: host, port: port),
            security: try pki.clientSecurity(identity: identity),
            maxFrameLength: maxFrameLength
        )
    }
}

extension AgentProcess {
    /// The set-up most integration tests start with: a scratch PKI and an agent over TLS with its
    /// certificate, started with `arguments` besides `--tls-dir`. Stop the agent and remove the PKI when done.
    public static func secured(
        _ arguments: [String] = [], launcher: (program: URL, arguments: [String], agent: URL)? = nil
    ) async throws -> (TestPKI, AgentProcess) {
        let pki = try TestPKI()
        do {
            return (pki, try await AgentProcess.start(["--tls-dir", pki.path] + arguments, launcher: launcher))
        } catch {
            pki.remove()
            throw error
        }
    }
}

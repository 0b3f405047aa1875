import CamRigClock
import CamRigWire
import Foundation
import NIOConcurrencyHelpers

/// A `camrig-agent` process started on this host (by `camrig demo`, the benchmarks and the tests):
/// started with `--listen HOST:0`, ready once it prints `listening HOST:PORT` on standard output.
///
/// Async code starts and stops agents with `start` and `stop`, which wait without holding a thread;
/// `startBlocking` and `stopBlocking` are for synchronous callers.
public final class LocalAgentProcess: @unchecked Sendable {
    /// Where the agent listens, as it announced it.
    public let endpoint: AgentEndpoint
    /// The child process (its identifier, its exit status).
    public let process: ChildProcess
    /// Where the agent's standard error goes.
    public let logFile: URL
    /// For a process simulating many hosts (`camrig-agent --hosts N`): each host's name and where it
    /// listens, in order; `endpoint` is the first one's. Empty for a process that is one agent.
    public let hosts: [(name: String, endpoint: AgentEndpoint)]

    private init(listening: Listening, process: ChildProcess, logFile: URL) {
        self.endpoint = listening.endpoint
        self.hosts = listening.hosts
        self.process = process
        self.logFile = logFile
    }

    /// What the agent announced on its first line of output.
    struct Listening {
        var endpoint: AgentEndpoint
        var hosts: [(name: String, endpoint: AgentEndpoint)] = []
    }

    /// The `camrig-agent` executable: `$CAMRIG_AGENT`, else next to this executable, else on `PATH`.
    public static func executable() throws -> URL {
        if let found = Programs.find("camrig-agent", override: "CAMRIG_AGENT") { return found }
        throw LocalAgentError(
            .executableNotFound, agent: "camrig-agent",
            "cannot find camrig-agent next to this program or on PATH; build it (`swift build`) or set CAMRIG_AGENT"
        )
    }

    /// Starts the agent with `arguments` (which must include `--listen HOST:0`) and waits, without
    /// holding a thread, until it reports where it listens; its standard error goes to `logFile`.
    ///
    /// Throws `LocalAgentError` when the agent exits first or stays silent past `timeout` (it is then
    /// stopped), and `CancellationError` when the task is cancelled meanwhile.
    public static func start(
        executable: URL? = nil, arguments: [String], logFile: URL, timeout: Duration = .seconds(20)
    ) async throws -> LocalAgentProcess {
        let (process, reader) = try launch(executable: executable, arguments: arguments, logFile: logFile, timeout: timeout)
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                reader.whenDone { continuation.resume(returning: $0) }
            }
        } onCancel: {
            reader.cancel()
        }
        switch Self.endpoint(from: outcome) {
        case .success(let listening):
            return LocalAgentProcess(listening: listening, process: process, logFile: logFile)
        case .failure(let failure):
            await process.reap(grace: failure.grace)
            throw failure.error(process: process, logFile: logFile, timeout: timeout)
        }
    }

    /// `start` for synchronous callers: blocks the calling thread until the agent listens.
    public static func startBlocking(
        executable: URL? = nil, arguments: [String], logFile: URL, timeout: Duration = .seconds(20)
    ) throws -> LocalAgentProcess {
        let (process, reader) = try launch(executable: executable, arguments: arguments, logFile: logFile, timeout: timeout)
        let result = NIOLockedValueBox<FirstLineReader.Outcome?>(nil)
        let done = DispatchSemaphore(value: 0)
        reader.whenDone { outcome in
            result.withLockedValue { $0 = outcome }
            done.signal()
        }
        done.wait()  // the reader's own deadline bounds this
        switch Self.endpoint(from: result.withLockedValue { $0 } ?? .timedOut) {
        case .success(let listening):
            return LocalAgentProcess(listening: listening, process: process, logFile: logFile)
        case .failure(let failure):
            process.reapBlocking(grace: failure.grace)
            throw failure.error(process: process, logFile: logFile, timeout: timeout)
        }
    }

    /// The agent's log so far.
    public func log() -> String { Self.read(logFile) }

    /// Whether the process is still running.
    public var isRunning: Bool { process.isRunning }

    /// The agent's resident memory in KiB, or nil once it is gone.
    public var residentKilobytes: Int? { ResidentMemory.kilobytes(pid: process.processIdentifier) }

    /// CPU time the agent has used so far (user and system, all threads), in seconds; nil once it is gone.
    public var cpuSeconds: Double? { ResidentMemory.cpuSeconds(pid: process.processIdentifier) }

    /// SIGKILL: a crash, with no chance to clean up.
    public func crash() {
        process.send(SIGKILL)
        process.waitBlocking()
    }

    /// SIGTERM, then waits without holding a thread (SIGKILL after `timeout`). Returns the exit status.
    @discardableResult
    public func stop(timeout: Duration = .seconds(10)) async -> Int32 {
        process.terminate()
        return await process.reap(grace: timeout).status
    }

    /// `stop` for synchronous callers: blocks the calling thread until the agent has exited.
    @discardableResult
    public func stopBlocking(timeout: Duration = .seconds(10)) -> Int32 {
        process.terminate()
        return process.reapBlocking(grace: timeout).status
    }

    // MARK: Starting

    private static func launch(
        executable: URL?, arguments: [String], logFile: URL, timeout: Duration
    ) throws -> (ChildProcess, FirstLineReader) {
        let executable = try executable ?? Self.executable()
        let agent = logFile.deletingPathExtension().lastPathComponent
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let log = try FileHandle(forWritingTo: logFile)
        defer { try? log.close() }
        let output = Pipe()
        let process: ChildProcess
        do {
            process = try ChildProcess.spawn(
                executable.path, arguments, stdout: .descriptor(output.fileHandleForWriting.fileDescriptor),
                stderr: .descriptor(log.fileDescriptor)
            )
        } catch {
            throw LocalAgentError(.startFailed, agent: agent, "\(error)")
        }
        // Only the child writes to the pipe now: its end of file is the child's.
        try? output.fileHandleForWriting.close()
        return (process, FirstLineReader(output.fileHandleForReading, timeout: timeout))
    }

    /// Why an agent did not come up, known before its process has been reaped.
    private enum StartFailure: Error {
        case timedOut
        case exited(output: String)
        case cancelled

        /// How long the process may take to exit by itself before it is killed.
        var grace: Duration {
            switch self {
            case .exited: .seconds(2)
            case .timedOut, .cancelled: .zero
            }
        }

        func error(process: ChildProcess, logFile: URL, timeout: Duration) -> any Error {
            let agent = logFile.deletingPathExtension().lastPathComponent
            let log = LocalAgentProcess.read(logFile).suffix(2000)
            switch self {
            case .cancelled:
                return CancellationError()
            case .timedOut:
                return LocalAgentError(.timeout, agent: agent, "camrig-agent did not report 'listening' within \(timeout); log:\n\(log)")
            case .exited(let output):
                return LocalAgentError(
                    .exitedWithoutListening, agent: agent,
                    "camrig-agent exited (status \(process.terminationStatus)) without listening; output '\(output)'; log:\n\(log)"
                )
            }
        }
    }

    private static func endpoint(from outcome: FirstLineReader.Outcome) -> Result<Listening, StartFailure> {
        switch outcome {
        case .line(let line) where line.hasPrefix("hosts "):
            // `hosts NAME=HOST:PORT …` from `camrig-agent --hosts N`.
            var hosts: [(name: String, endpoint: AgentEndpoint)] = []
            for entry in line.dropFirst("hosts ".count).split(separator: " ") {
                let parts = entry.split(separator: "=", maxSplits: 1)
                guard parts.count == 2, let endpoint = AgentEndpoint(String(parts[1])) else { return .failure(.exited(output: String(line.prefix(200)))) }
                hosts.append((String(parts[0]), endpoint))
            }
            guard let first = hosts.first else { return .failure(.exited(output: line)) }
            return .success(Listening(endpoint: first.endpoint, hosts: hosts))
        case .line(let line):
            guard line.hasPrefix("listening "), let endpoint = AgentEndpoint(String(line.dropFirst("listening ".count))) else {
                return .failure(.exited(output: line))
            }
            return .success(Listening(endpoint: endpoint))
        case .closed(let partial): return .failure(.exited(output: partial))
        case .timedOut: return .failure(.timedOut)
        case .cancelled: return .failure(.cancelled)
        }
    }

    // MARK: Stopping

    static func read(_ url: URL) -> String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }
}

/// The first line a child writes to standard output, read as it arrives (no thread waits on the
/// pipe), or why none came: the pipe closed, the deadline passed, or the wait was cancelled.
final class FirstLineReader: Sendable {
    enum Outcome: Sendable {
        case line(String)
        /// The pipe closed before a whole line: what came.
        case closed(String)
        case timedOut
        case cancelled
    }

    private struct State {
        var buffer = Data()
        var outcome: Outcome?
        var waiter: (@Sendable (Outcome) -> Void)?
    }

    private let state = NIOLockedValueBox(State())
    private let handle: FileHandle

    init(_ handle: FileHandle, timeout: Duration) {
        self.handle = handle
        handle.readabilityHandler = { [self] handle in
            let chunk = handle.availableData
            if chunk.isEmpty {
                finish(.closed(String(decoding: state.withLockedValue { $0.buffer }, as: UTF8.self)))
                return
            }
            let line = state.withLockedValue { state -> String? in
                state.buffer.append(chunk)
                guard let newline = state.buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
                return String(decoding: state.buffer[..<newline], as: UTF8.self)
            }
            if let line { finish(.line(line.trimmingCharacters(in: .whitespacesAndNewlines))) }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout.seconds) { [self] in finish(.timedOut) }
    }

    /// Calls `body` once with the outcome (at once when it is already known).
    func whenDone(_ body: @escaping @Sendable (Outcome) -> Void) {
        let known = state.withLockedValue { state -> Outcome? in
            if state.outcome == nil { state.waiter = body }
            return state.outcome
        }
        if let known { body(known) }
    }

    /// Stops waiting; the outcome is `cancelled` unless it was known already.
    func cancel() { finish(.cancelled) }

    private func finish(_ outcome: Outcome) {
        let (first, waiter) = state.withLockedValue { state -> (Bool, (@Sendable (Outcome) -> Void)?) in
            guard state.outcome == nil else { return (false, nil) }
            state.outcome = outcome
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        guard first else { return }
        handle.readabilityHandler = nil
        waiter?(outcome)
    }
}

/// Why an agent process on this machine could not be started or used.
public struct LocalAgentError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public enum Code: Sendable, Equatable {
        /// No `camrig-agent` executable was found.
        case executableNotFound
        /// The executable could not be run.
        case startFailed
        /// The agent did not report where it listens in time.
        case timeout
        /// The agent exited (or printed something else) instead of listening.
        case exitedWithoutListening
        /// The agent runs, but the coordinator could not connect to it or measure its clock in time.
        case notReady
    }

    /// What went wrong.
    public var code: Code
    /// The agent concerned (its name in the rig, or its log file's name).
    public var agent: String
    /// What failed and what to do, with the tail of the agent's log where there is one.
    public var message: String

    /// An error about `agent`.
    public init(_ code: Code, agent: String, _ message: String) {
        self.code = code
        self.agent = agent
        self.message = message
    }

    /// `AGENT: MESSAGE`.
    public var description: String { "\(agent): \(message)" }
}

/// A process's resident memory and CPU time, from `/proc`.
public enum ResidentMemory {
    /// User plus system CPU time of process `pid` in seconds (`/proc/PID/stat` fields 14 and 15).
    public static func cpuSeconds(pid: Int32 = getpid()) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name (which may hold spaces) start with field 3, the state.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// `VmRSS` of process `pid` in KiB (this process by default), or nil when it is gone or `/proc` is missing.
    public static func kilobytes(pid: Int32 = getpid()) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }
}

/// CamRig's programs, found the way each of them finds another.
public enum Programs {
    /// The program `name`: the path in the environment variable `override` when it is set, else the one
    /// next to this executable (symbolic links resolved), else the first on `PATH`; nil when none is.
    public static func find(_ name: String, override: String) -> URL? {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment[override] { return URL(fileURLWithPath: path) }
        let own = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let directories = [own.path] + (environment["PATH"] ?? "").split(separator: ":").map(String.init)
        return directories.lazy.map { URL(fileURLWithPath: $0).appendingPathComponent(name) }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }
}

import CamRigClock
import CamRigCoordinator
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers

/// A whole rig on this machine: a scratch CA, and `camrig-agent` processes on 127.0.0.1 with
/// synthetic cameras, each with a certificate of its own and, optionally, an injected clock error
/// whose truth the rig keeps, so that estimates and skews can be judged.
///
/// One call gives agents and a connected pool:
///
///     try await LoopbackRig.withRig(agents: LocalAgentSpec.simulated(count: 3), logger: logger) { rig, pool in
///         …
///     }
///
/// or step by step: `LoopbackRig(agents:)`, `startAgent`, `connect`, and `shutdown()` at the end
/// (a rig that is dropped without it kills its agents and removes its files).
public final class LoopbackRig: Sendable {
    /// One agent of the rig.
    public struct Member: SimulatedAgent {
        /// The agent's name: its certificate, its agent id, its log file (`NAME.log` in `work`).
        public var name: String
        /// Its position in the rig: the order agents were started in.
        public var index: Int
        /// What it was started with.
        public var spec: LocalAgentSpec
        /// The running process (shared by every host of a host simulation).
        public var process: LocalAgentProcess
        /// Where the coordinator dials it.
        public var endpoint: AgentEndpoint
        /// The simulated host clock: the truth an estimate is judged by.
        public var clock: HostClock
    }

    /// The rig's CA, the `coordinator` certificate and one agent certificate per secure agent.
    public let pki: ScratchPKI
    /// The rig's directory: the CA, the agents' logs and spools.
    public let work: URL
    /// The `CLOCK_MONOTONIC` instant from which injected drifts accumulate.
    public let epoch: Int64
    /// The `camrig-agent` executable the rig runs.
    public let executable: URL
    private let logLevel: String
    private let ownsWork: Bool
    private let state = NIOLockedValueBox(State())

    private struct State {
        var members: [Member] = []
        var nextIndex = 0
        var pools: [AgentPool] = []
        var stopped = false
    }

    /// Creates the rig's CA in `work` (default: a new temporary directory, removed by `shutdown`); no
    /// agents yet. `executable` defaults to `LocalAgentProcess.executable()`; agents log at `logLevel`.
    public init(caName: String = "CamRig loopback rig CA", executable: URL? = nil, work: URL? = nil, logLevel: String = "warning") throws {
        self.executable = try executable ?? LocalAgentProcess.executable()
        ownsWork = work == nil
        self.work = work ?? URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-rig-\(UUID().uuidString)")
        self.logLevel = logLevel
        epoch = HostClock.monotonicNow()
        pki = try ScratchPKI(path: self.work.appendingPathComponent("tls").path, caName: caName, agents: [], viewers: [])
    }

    /// Creates the rig and starts one agent per spec (see `startAgents`).
    public convenience init(
        agents specs: [LocalAgentSpec], caName: String = "CamRig loopback rig CA", executable: URL? = nil, work: URL? = nil,
        logLevel: String = "warning"
    ) async throws {
        try self.init(caName: caName, executable: executable, work: work, logLevel: logLevel)
        do {
            try await startAgents(specs)
        } catch {
            await shutdown()
            throw error
        }
    }

    deinit {
        // A rig dropped without `shutdown()`: nothing may outlive it.
        let (stopped, members) = state.withLockedValue { ($0.stopped, $0.members) }
        guard !stopped else { return }
        for process in Self.processes(of: members) { process.crash() }
        if ownsWork { try? FileManager.default.removeItem(at: work) }
    }

    // MARK: Agents

    /// The running agents, in the order they were started.
    public var members: [Member] { state.withLockedValue { $0.members } }

    /// Every member's endpoint, in order.
    public var endpoints: [AgentEndpoint] { members.map(\.endpoint) }

    /// The member called `name`.
    public func member(named name: String) -> Member? { members.first { $0.name == name } }

    /// Starts one agent: `name` defaults to `agent-N` (N its index + 1). Its certificate lists
    /// 127.0.0.1 and localhost.
    @discardableResult
    public func startAgent(_ spec: LocalAgentSpec = LocalAgentSpec(), name: String? = nil) async throws -> Member {
        let index = try reserve(1)
        let member = try await launch(spec, index: index, name: name ?? "agent-\(index + 1)")
        record([member])
        return member
    }

    /// Starts one agent per spec, up to `concurrency` at a time, named `agent-N`; `progress` hears how
    /// many are up. Agents that started before a failure stay in the rig (for `logs()` and `shutdown()`).
    @discardableResult
    public func startAgents(
        _ specs: [LocalAgentSpec], concurrency: Int = 8, progress: (@Sendable (Int) -> Void)? = nil
    ) async throws -> [Member] {
        guard !specs.isEmpty else { return [] }
        let first = try reserve(specs.count)
        var started: [Member] = []
        var failure: (any Error)?
        await withTaskGroup(of: Result<Member, any Error>.self) { group in
            var next = 0
            func add() {
                let offset = next
                next += 1
                group.addTask {
                    let index = first + offset
                    do { return .success(try await self.launch(specs[offset], index: index, name: "agent-\(index + 1)")) } catch { return .failure(error) }
                }
            }
            while next < min(specs.count, max(1, concurrency)) { add() }
            for await result in group {
                switch result {
                case .success(let member):
                    started.append(member)
                    progress?(started.count)
                case .failure(let error):
                    if failure == nil { failure = error }
                    group.cancelAll()
                }
                if failure == nil && next < specs.count { add() }
            }
        }
        started.sort { $0.index < $1.index }
        record(started)
        if let failure { throw failure }
        return started
    }

    /// Stops one agent (SIGTERM, then SIGKILL after `timeout`) and takes it out of the rig.
    public func stop(_ member: Member, timeout: Duration = .seconds(5)) async {
        await member.process.stop(timeout: timeout)
        state.withLockedValue { $0.members.removeAll { $0.name == member.name } }
    }

    private func reserve(_ count: Int) throws -> Int {
        try state.withLockedValue { state in
            guard !state.stopped else { throw LocalAgentError(.startFailed, agent: "rig", "the loopback rig has been shut down") }
            defer { state.nextIndex += count }
            return state.nextIndex
        }
    }

    private func record(_ started: [Member]) {
        let late = state.withLockedValue { state -> [Member] in
            guard !state.stopped else { return started }
            state.members.append(contentsOf: started)
            state.members.sort { $0.index < $1.index }
            return []
        }
        // Started while the rig shut down: they go at once.
        for process in Self.processes(of: late) { process.crash() }
    }

    /// The members' processes, each once (the hosts of a host simulation share one).
    public static func processes(of members: [Member]) -> [LocalAgentProcess] {
        var seen = Set<ObjectIdentifier>()
        return members.map(\.process).filter { seen.insert(ObjectIdentifier($0)).inserted }
    }

    private func launch(_ spec: LocalAgentSpec, index: Int, name: String) async throws -> Member {
        if spec.secure { try pki.issueAgent(name) }
        let process = try await LocalAgentProcess.start(
            executable: executable,
            arguments: spec.arguments(name: name, index: index, listen: "127.0.0.1:0", tls: pki.directory, work: work, epoch: epoch, logLevel: logLevel),
            logFile: work.appendingPathComponent("\(name).log")
        )
        return Member(name: name, index: index, spec: spec, process: process, endpoint: process.endpoint, clock: spec.clock(epoch: epoch))
    }

    /// Starts `count` simulated hosts in one `camrig-agent --hosts` process, named `agent-N` like the
    /// rig's other agents, each with `cameras` synthetic cameras and its own certificate, listener,
    /// spool and clock (with `clockErrors`, host N gets `HostClock.simulatedError(host: N − 1)`, as
    /// `LocalAgentSpec.simulated` gives separate processes). For many agents on one machine: a
    /// thousand fit where a thousand processes would not.
    @discardableResult
    public func startHostSimulation(
        count: Int, cameras: Int = 1, clockErrors: Bool = false, timeout: Duration = .seconds(300),
        progress: (@Sendable (String) -> Void)? = nil
    ) async throws -> [Member] {
        let first = try reserve(count)
        let names = (first..<(first + count)).map { "agent-\($0 + 1)" }
        for (offset, name) in names.enumerated() {
            try pki.issueAgent(name)
            if (offset + 1) % 200 == 0 { progress?("certificates: \(offset + 1)/\(count)") }
        }
        var arguments = [
            "--hosts", "\(count)", "--first-host", "\(first + 1)", "--identity", "agent", "--tls-dir", pki.path,
            "--listen", "127.0.0.1:0", "--spool-dir", work.appendingPathComponent("spool-hosts-\(first + 1)").path, "--log-level", logLevel,
        ]
        if cameras > 0 { arguments += ["--synthetic", "\(cameras)"] }
        if clockErrors { arguments += ["--simulate-host-clock-errors", "--simulate-clock-epoch-ns", "\(epoch)"] }
        progress?("starting one process with \(count) simulated hosts")
        let process = try await LocalAgentProcess.start(
            executable: executable, arguments: arguments, logFile: work.appendingPathComponent("hosts-\(first + 1).log"), timeout: timeout)
        let members = process.hosts.enumerated().map { offset, host in
            let error = clockErrors ? HostClock.simulatedError(host: first + offset) : (offsetMicroseconds: 0, driftPPM: 0)
            let spec = LocalAgentSpec(cameras: cameras, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM)
            return Member(name: host.name, index: first + offset, spec: spec, process: process, endpoint: host.endpoint, clock: spec.clock(epoch: epoch))
        }
        record(members)
        return members
    }

    // MARK: Coordinator

    /// The coordinator's TLS settings for this rig's CA (`viewer` certificates can be issued with `pki`).
    public func clientSecurity(identity: String = "coordinator") throws -> ClientSecurity {
        try pki.clientSecurity(identity: identity)
    }

    /// A pool over every member (TLS as `coordinator`), started, once every agent is connected and has
    /// a clock estimate from `clockSamples` probes. Throws `LocalAgentError` (`.notReady`, with the
    /// agents' logs) when some are not ready within `timeout`. `shutdown()` stops the pool too.
    public func connect(
        timing: RemoteAgent.Timing = .init(), clockSamples: Int = 8, timeout: Duration = .seconds(20), logger: Logger
    ) async throws -> AgentPool {
        let pool = AgentPool(endpoints: endpoints, security: try clientSecurity(), timing: timing, logger: logger)
        state.withLockedValue { $0.pools.append(pool) }
        pool.start()
        let notReady = await pool.waitUntilReady(clockSamples: clockSamples, timeout: timeout)
        guard notReady.isEmpty else {
            let names = notReady.map { agent in
                let snapshot = agent.snapshot
                if case .down(let reason, _) = snapshot.status { return "\(agent.name) (down: \(reason))" }
                return "\(agent.name) (\(snapshot.status.name))"
            }
            throw LocalAgentError(
                .notReady, agent: names.joined(separator: ", "),
                "not connected with a clock estimate within \(timeout); agent logs:\n\(logs())"
            )
        }
        return pool
    }

    /// Starts a rig of `agents`, connects a pool to it (see `connect`), runs `body`, and shuts the rig
    /// down whether `body` returns or throws.
    public static func withRig<T>(
        agents specs: [LocalAgentSpec],
        executable: URL? = nil,
        timing: RemoteAgent.Timing = .init(),
        clockSamples: Int = 8,
        timeout: Duration = .seconds(20),
        logger: Logger,
        _ body: (LoopbackRig, AgentPool) async throws -> T
    ) async throws -> T {
        let rig = try await LoopbackRig(agents: specs, executable: executable)
        return try await rig.run {
            let pool = try await rig.connect(timing: timing, clockSamples: clockSamples, timeout: timeout, logger: logger)
            return try await body(rig, pool)
        }
    }

    /// Runs `body`, then shuts the rig down, whether `body` returns or throws.
    public func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            let result = try await body()
            await shutdown()
            return result
        } catch {
            await shutdown()
            throw error
        }
    }

    // MARK: Ending

    /// Every agent's log (the last `limit` characters of each), for a failure message.
    public func logs(limit: Int = 2000) -> String { members.logs(limit: limit) }

    /// Stops the pools made by `connect`, then every agent (SIGTERM, SIGKILL after `timeout`), and
    /// removes the rig's directory unless the caller gave it. Safe to call more than once.
    public func shutdown(timeout: Duration = .seconds(5)) async {
        let (members, pools) = state.withLockedValue { state -> ([Member], [AgentPool]) in
            guard !state.stopped else { return ([], []) }
            state.stopped = true
            defer { state.pools = [] }
            return (state.members, state.pools)
        }
        for pool in pools { await pool.stop() }
        await withTaskGroup(of: Void.self) { group in
            for process in Self.processes(of: members) { group.addTask { await process.stop(timeout: timeout) } }
        }
        if ownsWork { try? FileManager.default.removeItem(at: work) }
    }
}

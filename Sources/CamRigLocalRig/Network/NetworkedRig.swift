import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigSecurity
import CamRigWire
import Foundation
import NIOCore
import NIOPosix

/// A rig of real `camrig-agent` processes, one per network namespace, each reached through its own
/// `LinkRelay` (or directly over the bridge when no conditions are given). A relay listens on a
/// loopback address of the host's own, on the agent's port, so the UDP clock channel (announced as
/// "this port on the address you reached me at") goes through the relay as well.
///
/// Each agent gets its own certificate (valid for its namespace address and the relay's loopback
/// address), synthetic cameras and, optionally, a simulated clock error, so estimates can be checked
/// against the truth.
public final class NetworkedRig: @unchecked Sendable {
    /// One host of the rig: what its agent runs (`LocalAgentSpec`) and the path to it.
    public struct AgentSpec: Sendable {
        /// Synthetic cameras.
        public var cameras: Int = 1
        /// Injected clock error: offset at `epoch`, in microseconds…
        public var clockOffsetMicroseconds: Double = 0
        /// …and drift, in parts per million.
        public var clockDriftPPM: Double = 0
        /// The path between the coordinator and the host, through a relay; nil: straight over the bridge.
        public var conditions: PathConditions?
        /// More `camrig-agent` flags.
        public var extraArguments: [String] = []

        /// A host with `cameras` synthetic cameras, the given clock error, path and flags.
        public init(cameras: Int = 1, clockOffsetMicroseconds: Double = 0, clockDriftPPM: Double = 0, conditions: PathConditions? = nil, extraArguments: [String] = []) {
            self.cameras = cameras
            self.clockOffsetMicroseconds = clockOffsetMicroseconds
            self.clockDriftPPM = clockDriftPPM
            self.conditions = conditions
            self.extraArguments = extraArguments
        }

        /// What the host's agent runs.
        public var agent: LocalAgentSpec {
            LocalAgentSpec(cameras: cameras, clockOffsetMicroseconds: clockOffsetMicroseconds, clockDriftPPM: clockDriftPPM, extraArguments: extraArguments)
        }
    }

    /// One host of the rig and its agent.
    public struct Member: SimulatedAgent {
        /// `agent-N`: its certificate and agent id.
        public var name: String
        /// What the host was built with.
        public var spec: AgentSpec
        /// The host's namespace and addresses.
        public var host: HostNetwork.Host
        /// The running process (inside the host's namespace).
        public var process: LocalAgentProcess
        /// The relay in front of the host, when the spec gave conditions.
        public var relay: LinkRelay?
        /// Where the coordinator dials: the relay, or the host itself.
        public var endpoint: AgentEndpoint
        /// The simulated host clock (the truth an estimate is judged by).
        public var clock: HostClock
    }

    /// The namespaces and the bridge.
    public let network: HostNetwork
    /// The rig's CA and certificates.
    public let tls: TLSDirectory
    /// The rig's directory: TLS, logs, spools.
    public let work: URL
    /// The `CLOCK_MONOTONIC` instant from which injected drifts accumulate.
    public let epoch: Int64
    /// The hosts, in order.
    public private(set) var members: [Member] = []
    /// The threads the relays run on (other relays on the same rig, such as a baseline's, can share them).
    public let relayGroup = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    private let agentExecutable: URL
    private let ownsWork: Bool
    private let logLevel: String

    /// Builds the network and starts one agent per spec. `seed` seeds the relays' delays and losses.
    public init(agents specs: [AgentSpec], agentExecutable: URL, seed: UInt64 = 1, work: URL? = nil, logLevel: String = "warning") throws {
        network = try HostNetwork(hosts: specs.count)
        ownsWork = work == nil
        self.work = work ?? URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-rig-\(UUID().uuidString)")
        self.agentExecutable = agentExecutable
        self.logLevel = logLevel
        tls = TLSDirectory(path: self.work.appendingPathComponent("tls").path)
        epoch = HostClock.monotonicNow()
        do {
            try tls.initialize(caName: "CamRig test rig CA")
            for (index, spec) in specs.enumerated() {
                let host = network.hosts[index]
                let name = "agent-\(index + 1)"
                try tls.issue(name: name, role: .agent, hostnames: ["127.0.0.1", "localhost", host.address, host.relayAddress])
                let arguments = spec.agent.arguments(
                    name: name, index: index, listen: "\(host.address):\(WireProtocol.defaultPort)", tls: tls, work: self.work, epoch: epoch,
                    logLevel: logLevel
                )
                let command = network.command(on: host, agentExecutable.path, arguments)
                let process = try LocalAgentProcess.startBlocking(
                    executable: command.executable, arguments: command.arguments,
                    logFile: self.work.appendingPathComponent("\(name).log")
                )
                var relay: LinkRelay?
                var endpoint = process.endpoint
                if let conditions = spec.conditions {
                    let target = try SocketAddress(ipAddress: host.address, port: process.endpoint.port)
                    let made = try LinkRelay(
                        listenHost: host.relayAddress, listenPort: process.endpoint.port, target: target, conditions: conditions,
                        seed: seed &+ UInt64(index) &* 0x9E37_79B9, group: relayGroup
                    )
                    endpoint = AgentEndpoint(host: host.relayAddress, port: process.endpoint.port)
                    relay = made
                }
                members.append(Member(name: name, spec: spec, host: host, process: process, relay: relay, endpoint: endpoint, clock: spec.agent.clock(epoch: epoch)))
            }
        } catch {
            shutdown()
            throw error
        }
    }

    /// `init` for async code: the network is built and the agents started on a thread of their own,
    /// so that no thread of the caller's executor waits on `ip` or on the agents.
    public static func start(
        agents specs: [AgentSpec], agentExecutable: URL, seed: UInt64 = 1, work: URL? = nil, logLevel: String = "warning"
    ) async throws -> NetworkedRig {
        try await onDedicatedThread("camrig-networked-rig") {
            try NetworkedRig(agents: specs, agentExecutable: agentExecutable, seed: seed, work: work, logLevel: logLevel)
        }
    }

    deinit { shutdown() }

    /// Where the coordinator dials each host, in order.
    public var endpoints: [AgentEndpoint] { members.map(\.endpoint) }

    /// The coordinator's TLS settings for this rig's CA.
    public func clientSecurity() throws -> ClientSecurity {
        .tls(try MutualTLS.client(directory: tls, identityName: "coordinator"))
    }

    /// The member called `name`.
    public func member(named name: String) -> Member? { members.first { $0.name == name } }

    /// Kills the member's agent with SIGKILL: a crash, with no chance to clean up.
    public func crash(_ member: Member) { member.process.crash() }

    /// Starts the member's agent again on its host, with its port, certificate, clock and spool, as a
    /// service manager would after a crash; `extraArguments` are added (a clock step, say). Returns the
    /// member as it now is. Not safe to call concurrently with itself.
    @discardableResult
    public func restart(_ member: Member, extraArguments: [String] = []) throws -> Member {
        guard let index = members.firstIndex(where: { $0.name == member.name }) else {
            throw HostNetworkError("no member \(member.name) in this rig")
        }
        member.process.crash()
        let arguments = member.spec.agent.arguments(
            name: member.name, index: index, listen: "\(member.host.address):\(WireProtocol.defaultPort)", tls: tls, work: work,
            epoch: epoch, logLevel: logLevel
        ) + extraArguments
        let command = network.command(on: member.host, agentExecutable.path, arguments)
        let process = try LocalAgentProcess.startBlocking(
            executable: command.executable, arguments: command.arguments,
            logFile: work.appendingPathComponent("\(member.name)-restart-\(UUID().uuidString.prefix(8)).log")
        )
        members[index].process = process
        return members[index]
    }

    /// `restart` for async code: the agent is started on a thread of its own.
    @discardableResult
    public func relaunch(_ member: Member, extraArguments: [String] = []) async throws -> Member {
        try await onDedicatedThread("camrig-agent-restart") { try self.restart(member, extraArguments: extraArguments) }
    }

    /// Cuts the member's host off the network (as a pulled cable); `restore` brings it back.
    public func cut(_ member: Member) throws { try network.cut(member.host) }
    /// Brings a cut-off member back.
    public func restore(_ member: Member) throws { try network.restore(member.host) }

    private var stopped = false

    /// Stops the relays and agents and removes the network (and the directory, unless the caller gave
    /// it). Safe to call more than once.
    public func shutdown() {
        guard !stopped else { return }
        stopped = true
        for member in members {
            member.relay?.shutdown()
            member.process.stopBlocking(timeout: .seconds(5))
        }
        try? relayGroup.syncShutdownGracefully()
        network.shutdown()
        if ownsWork { try? FileManager.default.removeItem(at: work) }
    }

    /// `shutdown` for async code: the agents are stopped and the network removed on a thread of their own.
    public func close() async {
        _ = try? await onDedicatedThread("camrig-networked-rig-close") { self.shutdown() }
    }

    /// Every agent's log, for a failure message.
    public func logs(limit: Int = 2000) -> String { members.logs(limit: limit) }
}

import CamRigCoordinator
import CamRigDevices
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
    public struct AgentSpec: Sendable {
        public var cameras: Int = 1
        /// Injected clock error: offset at `epoch`, and drift.
        public var clockOffsetMicroseconds: Double = 0
        public var clockDriftPPM: Double = 0
        public var conditions: PathConditions?
        public var extraArguments: [String] = []
        public init(cameras: Int = 1, clockOffsetMicroseconds: Double = 0, clockDriftPPM: Double = 0, conditions: PathConditions? = nil, extraArguments: [String] = []) {
            self.cameras = cameras
            self.clockOffsetMicroseconds = clockOffsetMicroseconds
            self.clockDriftPPM = clockDriftPPM
            self.conditions = conditions
            self.extraArguments = extraArguments
        }
    }

    public struct Member: @unchecked Sendable {
        public var name: String
        public var spec: AgentSpec
        public var host: HostNetwork.Host
        public var process: LocalAgentProcess
        public var relay: LinkRelay?
        /// Where the coordinator dials: the relay, or the host itself.
        public var endpoint: AgentEndpoint
        /// The simulated host clock (the truth an estimate is judged by).
        public var clock: HostClock

        /// How far `estimate` is from this host's true offset at coordinator instant `t`, in nanoseconds.
        public func offsetError(of estimate: ClockEstimate, at t: Int64 = HostClock.monotonicNow()) -> Double {
            estimate.offset(atCoordinator: t) - Double(clock.reading(atMonotonic: t) - t)
        }
    }

    public let network: HostNetwork
    public let tls: TLSDirectory
    public let work: URL
    public let epoch: Int64
    public private(set) var members: [Member] = []
    /// The threads the relays run on (other relays on the same rig, such as a baseline's, can share them).
    public let relayGroup = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    private let agentExecutable: URL
    private let ownsWork: Bool

    /// Builds the network and starts one agent per spec. `seed` seeds the relays' delays and losses.
    public init(agents specs: [AgentSpec], agentExecutable: URL, seed: UInt64 = 1, work: URL? = nil, logLevel: String = "warning") throws {
        network = try HostNetwork(hosts: specs.count)
        ownsWork = work == nil
        self.work = work ?? URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-rig-\(UUID().uuidString)")
        self.agentExecutable = agentExecutable
        tls = TLSDirectory(path: self.work.appendingPathComponent("tls").path)
        epoch = HostClock.monotonicNow()
        do {
            try tls.initialize(caName: "CamRig test rig CA")
            for (index, spec) in specs.enumerated() {
                let host = network.hosts[index]
                let name = "agent-\(index + 1)"
                try tls.issue(name: name, role: .agent, hostnames: ["127.0.0.1", "localhost", host.address, host.relayAddress])
                var arguments = [
                    "--listen", "\(host.address):\(WireProtocol.defaultPort)",
                    "--tls-dir", tls.path, "--identity", name,
                    "--synthetic", "\(spec.cameras)", "--synthetic-seed", "\(index * 16 + 1)",
                    "--spool-dir", self.work.appendingPathComponent("spool-\(name)").path,
                    "--log-level", logLevel,
                ]
                if spec.clockOffsetMicroseconds != 0 || spec.clockDriftPPM != 0 {
                    arguments += [
                        "--simulate-clock-offset-us=\(spec.clockOffsetMicroseconds)",
                        "--simulate-clock-drift-ppm=\(spec.clockDriftPPM)",
                        "--simulate-clock-epoch-ns", "\(epoch)",
                    ]
                }
                let command = network.command(on: host, agentExecutable.path, arguments + spec.extraArguments)
                let process = try LocalAgentProcess.start(
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
                let clock = HostClock(offsetNanoseconds: Int64((spec.clockOffsetMicroseconds * 1000).rounded()), driftPPM: spec.clockDriftPPM, epoch: epoch)
                members.append(Member(name: name, spec: spec, host: host, process: process, relay: relay, endpoint: endpoint, clock: clock))
            }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    public var endpoints: [AgentEndpoint] { members.map(\.endpoint) }

    /// The coordinator's TLS settings for this rig's CA.
    public func clientSecurity() throws -> ClientSecurity {
        .tls(try MutualTLS.client(directory: tls, identityName: "coordinator"))
    }

    public func member(named name: String) -> Member? { members.first { $0.name == name } }

    /// Cuts the member's host off the network (as a pulled cable); `restore` brings it back.
    public func cut(_ member: Member) throws { try network.cut(member.host) }
    public func restore(_ member: Member) throws { try network.restore(member.host) }

    private var stopped = false
    public func shutdown() {
        guard !stopped else { return }
        stopped = true
        for member in members {
            member.relay?.shutdown()
            member.process.stop(timeout: 5)
        }
        try? relayGroup.syncShutdownGracefully()
        network.shutdown()
        if ownsWork { try? FileManager.default.removeItem(at: work) }
    }

    /// Every agent's log, for a failure message.
    public func logs(limit: Int = 2000) -> String {
        members.map { "\($0.name): \($0.process.log().suffix(limit))" }.joined(separator: "\n")
    }
}

import CamRigWire
import Logging
import NIOConcurrencyHelpers

/// The rig's agents: one `RemoteAgent` per endpoint, each connecting, probing its clock and
/// reconnecting on its own task.
public final class AgentPool: Sendable {
    public let agents: [RemoteAgent]
    private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])

    public init(endpoints: [AgentEndpoint], security: ClientSecurity, timing: RemoteAgent.Timing = .init(), logger: Logger) {
        agents = endpoints.map { RemoteAgent(endpoint: $0, security: security, timing: timing, logger: logger) }
    }

    /// Starts every agent's connection task (idempotent).
    public func start() {
        tasks.withLockedValue { tasks in
            guard tasks.isEmpty else { return }
            tasks = agents.map { agent in Task { await agent.run() } }
        }
    }

    /// Closes every connection.
    public func stop() async {
        let running = tasks.withLockedValue { tasks in
            defer { tasks.removeAll() }
            return tasks
        }
        for task in running { task.cancel() }
        for task in running { await task.value }
    }

    /// Waits until every agent is connected and has a clock estimate from `clockSamples` probes, or
    /// `timeout` passes. Returns the agents that are not ready, which callers name in their errors.
    public func waitUntilReady(clockSamples: Int = 8, timeout: Duration) async -> [RemoteAgent] {
        await withTaskGroup(of: (Int, Bool).self) { group in
            for (index, agent) in agents.enumerated() {
                group.addTask {
                    let connected = await agent.waitUntilConnected(timeout: timeout)
                    guard connected else { return (index, false) }
                    return (index, await agent.waitForClock(samples: clockSamples, timeout: timeout))
                }
            }
            var notReady: [Int] = []
            for await (index, ready) in group where !ready { notReady.append(index) }
            return notReady.sorted().map { agents[$0] }
        }
    }

    /// The agent with this id (as announced) or address.
    public func agent(named name: String) -> RemoteAgent? {
        agents.first { $0.snapshot.agentID == name } ?? agents.first { $0.endpoint.description == name }
    }
}

import CamRigSecurity
import CamRigWire
import Logging
import NIOConcurrencyHelpers

/// The rig's agents: one `RemoteAgent` per endpoint, each connecting, probing its clock and
/// reconnecting on its own task.
public final class AgentPool: Sendable {
    private struct State {
        var agents: [RemoteAgent]
        var tasks: [Task<Void, Never>] = []
        var started = false
        /// The streams of `watch()`, by id.
        var watchers: [UInt64: AsyncStream<Event>.Continuation] = [:]
        var nextWatcher: UInt64 = 0
    }

    /// What a watcher of the pool hears (`watch()`).
    public enum Event: Sendable {
        /// The agent (by the id it announced) connected, announcing these capabilities; its events are
        /// subscribed to (without `state-events` among them when that failed: ask it instead).
        case connected(agent: String, capabilities: [String])
        /// Its events stopped while it stays connected: ask it for what it would have pushed.
        case unheard(agent: String)
        /// Its connection closed; it is being connected again.
        case disconnected(agent: String)
        /// An event its agent sent (PROTOCOL.md, "Events").
        case event(agent: String, WireEvent)
    }

    private let state: NIOLockedValueBox<State>
    private let security: ClientSecurity
    private let timing: RemoteAgent.Timing
    private let logger: Logger

    /// The rig's agents, in the order they were given or added.
    public var agents: [RemoteAgent] { state.withLockedValue { $0.agents } }

    /// Creates the pool; nothing connects before `start()`. While estimates settle, a large pool
    /// probes each agent less often (at least 100 µs per agent between one agent's rounds), so that
    /// agents settling at once ask the coordinator for no more than 10 000 rounds of two probes a second.
    public init(endpoints: [AgentEndpoint], security: ClientSecurity, timing: RemoteAgent.Timing = .init(), logger: Logger) {
        var timing = timing
        timing.settlingProbeInterval = max(timing.settlingProbeInterval, .microseconds(100 * Int64(endpoints.count)))
        self.security = security
        self.timing = timing
        self.logger = logger
        state = NIOLockedValueBox(State(agents: endpoints.map { RemoteAgent(endpoint: $0, security: security, timing: timing, logger: logger) }))
    }

    /// Every agent's connections and events, from each agent's next connection on: call it before
    /// `start()` to hear every connection. Each agent's connections subscribe to its events once the pool
    /// is watched (`RemoteAgent.watchedKinds`). The stream keeps the newest 65 536 events its consumer has
    /// not taken (a consumer that falls further behind loses the oldest: it should look at the whole rig
    /// again now and then), and ends when its consumer stops (cancelled or gone).
    public func watch() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(65_536))
        let (id, agents) = state.withLockedValue { state in
            let id = state.nextWatcher
            state.nextWatcher += 1
            state.watchers[id] = continuation
            return (id, state.agents)
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLockedValue { $0.watchers.removeValue(forKey: id) } }
        for agent in agents { agent.watch(broadcaster) }
        return stream
    }

    /// Hands an event to every watcher.
    private var broadcaster: @Sendable (Event) -> Void {
        { [weak self] event in
            for watcher in self?.state.withLockedValue({ Array($0.watchers.values) }) ?? [] { watcher.yield(event) }
        }
    }

    /// Starts every agent's connection task (idempotent).
    public func start() {
        state.withLockedValue { state in
            guard !state.started else { return }
            state.started = true
            state.tasks = state.agents.map { agent in Task { await agent.run() } }
        }
    }

    /// Adds an agent (one that enrolled while the rig runs) and connects to it if the pool is started; an
    /// endpoint already in the pool is not added twice. Returns the pool's agent for it.
    @discardableResult
    public func add(_ endpoint: AgentEndpoint) -> RemoteAgent {
        state.withLockedValue { state in
            if let known = state.agents.first(where: { $0.endpoint == endpoint }) { return known }
            let agent = RemoteAgent(endpoint: endpoint, security: security, timing: timing, logger: logger)
            if !state.watchers.isEmpty { agent.watch(broadcaster) }
            state.agents.append(agent)
            if state.started { state.tasks.append(Task { await agent.run() }) }
            return agent
        }
    }

    /// Removes an agent from the rig (one whose certificate was revoked): its connection closes and is
    /// not made again. Returns whether the pool had it.
    @discardableResult
    public func remove(_ endpoint: AgentEndpoint) async -> Bool {
        let task = state.withLockedValue { state -> Task<Void, Never>?? in
            guard let index = state.agents.firstIndex(where: { $0.endpoint == endpoint }) else { return nil }
            state.agents.remove(at: index)
            guard state.started else { return .some(nil) }
            return .some(state.tasks.remove(at: index))
        }
        guard let task else { return false }
        task?.cancel()
        await task?.value
        return true
    }

    /// Judges every connected agent's certificate again with `verifier` (after the CA's revocation list
    /// changed): connections whose certificates are now refused are closed. Returns those agents, each
    /// with why.
    public func recheck(with verifier: PeerCertificateVerifier) async -> [(agent: RemoteAgent, refusal: PeerRefusal)] {
        var refused: [(RemoteAgent, PeerRefusal)] = []
        for agent in agents {
            if let refusal = await agent.recheck(with: verifier) { refused.append((agent, refusal)) }
        }
        return refused
    }

    /// Closes every connection.
    public func stop() async {
        let running = state.withLockedValue { state in
            defer {
                state.tasks.removeAll()
                state.started = false
            }
            return state.tasks
        }
        for task in running { task.cancel() }
        for task in running { await task.value }
    }

    /// Waits until every agent is connected and has a clock estimate from `clockSamples` probes, or
    /// `timeout` passes. Returns the agents that are not ready, which callers name in their errors.
    public func waitUntilReady(clockSamples: Int = 8, timeout: Duration) async -> [RemoteAgent] {
        await agents(failing: agents) { agent in
            guard await agent.waitUntilConnected(timeout: timeout) else { return false }
            return await agent.waitForClock(samples: clockSamples, timeout: timeout)
        }
    }

    /// Waits until every connected agent's clock estimate is settled (`ClockEstimate.isSettled`), or
    /// `timeout` passes. Returns the connected agents whose estimates are not, which callers name.
    public func waitUntilSettled(timeout: Duration) async -> [RemoteAgent] {
        await agents(failing: agents.filter { $0.snapshot.status == .connected }) { await $0.waitForSettledClock(timeout: timeout) }
    }

    /// Runs `check` on each of `candidates` at once; returns those for which it is false, in order.
    private func agents(failing candidates: [RemoteAgent], _ check: @escaping @Sendable (RemoteAgent) async -> Bool) async -> [RemoteAgent] {
        await withTaskGroup(of: (Int, Bool).self) { group in
            for (index, agent) in candidates.enumerated() {
                group.addTask { (index, await check(agent)) }
            }
            var failed: [Int] = []
            for await (index, passed) in group where !passed { failed.append(index) }
            return failed.sorted().map { candidates[$0] }
        }
    }

    /// The agent with this id (as announced) or address.
    public func agent(named name: String) -> RemoteAgent? {
        agents.first { $0.snapshot.agentID == name } ?? agents.first { $0.endpoint.description == name }
    }
}

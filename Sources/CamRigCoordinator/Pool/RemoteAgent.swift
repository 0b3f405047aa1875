import CamRigClock
import CamRigSecurity
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// One agent of the rig as the coordinator keeps it: a connection that comes back after failures
/// (exponential backoff with jitter), health, and the agent's clock relative to the coordinator's.
///
/// Every agent runs on its own task, so one agent down, slow or refusing never stalls the others.
public final class RemoteAgent: Sendable {
    /// Connection state, as `camrig agents` reports it.
    public enum Status: Sendable, Equatable {
        case connecting
        case connected
        /// Not connected; the reason of the last failure and when the next attempt is due.
        case down(reason: String, retryIn: Duration)
        case stopped

        public var name: String {
            switch self {
            case .connecting: "connecting"
            case .connected: "connected"
            case .down: "down"
            case .stopped: "stopped"
            }
        }
    }

    /// Everything known about the agent right now.
    public struct Snapshot: Sendable {
        public var endpoint: AgentEndpoint
        public var status: Status
        /// The id the agent announced (its certificate name by default); empty until first connected.
        public var agentID: String
        public var software: String
        /// When the agent last answered anything (wall clock).
        public var lastSeen: Date?
        public var connectedSince: Date?
        public var connectAttempts: Int
        public var clock: ClockEstimate?
        public var clockSamples: Int
        public var clockJumps: Int
        /// The most recent round trips of clock probes, nanoseconds, newest last.
        public var recentRoundTrips: [Int64]
        /// How the clock is probed.
        public var clockTransport: ClockTransport?

        /// A name for messages: the agent id once known, else the address.
        public var name: String { agentID.isEmpty ? endpoint.description : agentID }
    }

    /// How often and how eagerly to probe and reconnect.
    public struct Timing: Sendable {
        /// Probes sent back to back after (re)connecting, to get a first estimate quickly.
        public var initialProbes: Int = 16
        public var initialProbeInterval: Duration = .milliseconds(10)
        /// Probe interval after the burst while the estimate is not settled (`ClockEstimate.isSettled`):
        /// drift is learnt from the span the probes cover, and the offset at its end from how many
        /// probes there are, so a fresh connection probes briskly until it knows both well enough,
        /// typically one to two seconds.
        public var settlingProbeInterval: Duration = .milliseconds(20)
        /// Probe interval once settled.
        public var probeInterval: Duration = .milliseconds(500)
        /// UDP probes sent back to back at each interval after the first burst, of which the one with
        /// the shortest round trip counts. A path that idled between probes (cores in deep sleep, the kernel's
        /// receive work deferred) delays the first packet on one leg more than the other; the next
        /// finds it awake.
        public var probesPerRound = 2
        public var probeTimeout: TimeAmount = .seconds(2)
        public var connectTimeout: TimeAmount = .seconds(5)
        public var initialBackoff: Duration = .milliseconds(250)
        public var maximumBackoff: Duration = .seconds(10)
        /// Probe over the agent's UDP clock channel when it has one (kernel receive timestamps, no TLS
        /// or event loop in the path); otherwise over the TLS connection.
        public var preferUDPClockChannel = true

        public init() {}
    }

    public let endpoint: AgentEndpoint
    private let security: ClientSecurity
    private let timing: Timing
    private let logger: Logger

    private struct State {
        var status: Status = .connecting
        var client: AgentClient?
        var agentID = ""
        var software = ""
        var lastSeen: Date?
        var connectedSince: Date?
        var connectAttempts = 0
        var estimator: ClockEstimator
        var recentRoundTrips: [Int64] = []
        var clockTransport: ClockTransport?
        /// Why the coordinator closed the live connection itself (its certificate now refused), for the status.
        var closedBecause: String?
        /// Where this agent's connections and events go while its pool is watched (`AgentPool.watch()`).
        var watcher: (@Sendable (AgentPool.Event) -> Void)?

        var clockSettled: Bool { estimator.estimate?.isSettled() ?? false }
    }

    private let state: NIOLockedValueBox<State>

    public init(endpoint: AgentEndpoint, security: ClientSecurity, timing: Timing = .init(), clockConfiguration: ClockEstimator.Configuration = .init(), logger: Logger) {
        self.endpoint = endpoint
        self.security = security
        self.timing = timing
        self.logger = logger
        self.state = NIOLockedValueBox(State(estimator: ClockEstimator(configuration: clockConfiguration)))
    }

    public var snapshot: Snapshot {
        state.withLockedValue { state in
            let estimate = state.estimator.estimate
            return Snapshot(
                endpoint: endpoint,
                status: state.status,
                agentID: state.agentID,
                software: state.software,
                lastSeen: state.lastSeen,
                connectedSince: state.connectedSince,
                connectAttempts: state.connectAttempts,
                clock: estimate,
                clockSamples: state.estimator.sampleCount,
                clockJumps: state.estimator.jumpCount,
                recentRoundTrips: state.recentRoundTrips,
                clockTransport: state.clockTransport
            )
        }
    }

    /// The agent's name for messages: its id once known, else its address.
    public var name: String {
        state.withLockedValue { $0.agentID.isEmpty ? endpoint.description : $0.agentID }
    }

    /// The most recent round trips of clock probes, nanoseconds, newest last (without refitting the clock).
    public var recentRoundTrips: [Int64] { state.withLockedValue { $0.recentRoundTrips } }

    /// The live connection.
    ///
    /// - Throws: `AgentClientError` naming the agent when it is not connected.
    public func client() throws -> AgentClient {
        let (client, status) = state.withLockedValue { ($0.client, $0.status) }
        guard let client else {
            var detail = "not connected"
            if case .down(let reason, _) = status { detail += " (\(reason))" }
            throw AgentClientError(.connectionClosed, agent: name, "\(detail); check that camrig-agent runs there (`camrig agents` shows every agent's state)")
        }
        return client
    }

    /// Judges the connected agent's certificate again with `verifier` (a revocation list read since it
    /// connected): when it is now refused, the connection is closed and the refusal returned. Later
    /// connections are refused in their TLS handshake, saying why, for as long as the list says so.
    public func recheck(with verifier: PeerCertificateVerifier) async -> PeerRefusal? {
        guard let client = state.withLockedValue({ $0.client }) else { return nil }
        state.withLockedValue { $0.closedBecause = nil }
        guard let refusal = await client.recheck(with: verifier) else { return nil }
        state.withLockedValue { $0.closedBecause = refusal.message }
        logger.warning("closed the connection to an agent whose certificate is now refused", metadata: ["agent": "\(name)", "reason": "\(refusal.message)"])
        return refusal
    }

    /// The current clock estimate.
    ///
    /// - Throws: when no probe has been answered yet.
    public func clockEstimate() throws -> ClockEstimate {
        guard let estimate = state.withLockedValue({ $0.estimator.estimate }) else {
            throw AgentClientError(.timeout, agent: name, "no clock estimate yet: no clock probe answered")
        }
        return estimate
    }

    /// Waits until connected or `timeout` passes; returns whether connected.
    public func waitUntilConnected(timeout: Duration) async -> Bool {
        await wait(timeout: timeout) { $0.client != nil }
    }

    /// Waits until the clock estimate rests on at least `samples` probes, or `timeout` passes.
    public func waitForClock(samples: Int, timeout: Duration) async -> Bool {
        await wait(timeout: timeout) { $0.estimator.sampleCount >= samples }
    }

    /// Waits until the clock estimate is settled (`ClockEstimate.isSettled`) or `timeout` passes;
    /// returns whether it is.
    public func waitForSettledClock(timeout: Duration) async -> Bool {
        await wait(timeout: timeout) { $0.clockSettled }
    }

    /// Polls `condition` on the state every 10 ms until it holds (true) or `timeout` passes or the task
    /// is cancelled (false).
    private func wait(timeout: Duration, until condition: (State) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !state.withLockedValue({ condition($0) }) {
            guard ContinuousClock.now < deadline, !Task.isCancelled else { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    /// From the next connection on, tells `sink` of this agent's connections and of the events its agent
    /// sends (every kind, subscribed on each connection).
    func watch(_ sink: @escaping @Sendable (AgentPool.Event) -> Void) {
        state.withLockedValue { $0.watcher = sink }
    }

    /// The events a watched pool subscribes to: what a view of the rig needs (capability `state-events`
    /// for the last three; an agent without it sends the others).
    static let watchedKinds: [WireEventKind] = [
        .deviceConnected, .deviceDisconnected, .leaseLost, .spoolNearFull, .deviceChanged, .spoolStatus, .phaseStatus,
    ]

    /// Subscribes to the agent's events, tells `sink` of the connection once the subscription is in place
    /// (what the agent pushes from then on reaches the watcher), and passes the events on until the
    /// connection closes.
    ///
    /// The connection is announced with the agent's capabilities, less `state-events` when the
    /// subscription could not be made: a watcher then asks that agent for what it would have pushed. If
    /// the events stop while the connection stays, `sink` hears `.unheard`. Returns only once the
    /// connection has closed, so the connection's other children run on whatever happens here.
    private func listen(_ client: AgentClient, agent: String, _ sink: @Sendable (AgentPool.Event) -> Void) async {
        let capabilities = client.welcome.capabilities
        guard capabilities.contains(WireProtocol.Capability.events) else {
            sink(.connected(agent: agent, capabilities: capabilities.filter { $0 != WireProtocol.Capability.stateEvents }))
            await client.closed
            return
        }
        var subscribe = WireSubscribe()
        subscribe.kinds = Self.watchedKinds
        // Events are few and small; a deep buffer, drained at once, so they never hold up the connection.
        var messages = client.stream(.subscribe(subscribe), buffering: .init(lowWatermark: 64, highWatermark: 256)).makeAsyncIterator()
        do {
            guard case .ok? = try await messages.next()?.envelope.body else {
                throw AgentClientError(.protocolViolation, agent: agent, "answered Subscribe with something other than Ok")
            }
        } catch {
            logger.notice("agent events cannot be subscribed to; asking it instead", metadata: ["agent": "\(agent)", "reason": "\(error)"])
            sink(.connected(agent: agent, capabilities: capabilities.filter { $0 != WireProtocol.Capability.stateEvents }))
            await client.closed
            return
        }
        sink(.connected(agent: agent, capabilities: capabilities))
        do {
            while let message = try await messages.next() {
                if case .event(let event) = message.envelope.body { sink(.event(agent: agent, event)) }
            }
        } catch {
            logger.debug("agent events ended", metadata: ["agent": "\(agent)", "reason": "\(error)"])
        }
        if !Task.isCancelled { sink(.unheard(agent: agent)) }
        await client.closed
    }

    /// Connects, probes the clock and reconnects after failures until the task is cancelled.
    func run() async {
        var backoff = ReconnectBackoff(initial: timing.initialBackoff, maximum: timing.maximumBackoff)
        while !Task.isCancelled {
            state.withLockedValue {
                $0.status = .connecting
                $0.connectAttempts += 1
            }
            do {
                let client = try await AgentClient.connect(
                    to: endpoint,
                    security: security,
                    timeout: timing.connectTimeout,
                    keepAliveInterval: .seconds(10),
                    logger: logger
                )
                state.withLockedValue { state in
                    state.client = client
                    state.status = .connected
                    state.agentID = client.welcome.agentID
                    state.software = client.welcome.agentSoftware
                    state.connectedSince = Date()
                    state.lastSeen = Date()
                }
                logger.info("agent connected", metadata: ["agent": "\(client.welcome.agentID)", "address": "\(endpoint)"])
                backoff.reset()
                let sink = state.withLockedValue { $0.watcher }
                let agentID = client.welcome.agentID
                // Until the connection drops or the pool stops; then close it, which ends every child.
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await client.closed }
                    group.addTask { await self.probe(client) }
                    if let sink { group.addTask { await self.listen(client, agent: agentID, sink) } }
                    await group.next()
                    group.cancelAll()
                    await client.close()
                }
                state.withLockedValue {
                    $0.client = nil
                    $0.status = .down(reason: $0.closedBecause ?? "connection closed", retryIn: backoff.current)
                    $0.closedBecause = nil
                }
                sink?(.disconnected(agent: agentID))
                if Task.isCancelled { break }
                logger.warning("agent connection lost; reconnecting", metadata: ["agent": "\(name)"])
            } catch {
                let reason = (error as? AgentClientError)?.message ?? "\(error)"
                state.withLockedValue { $0.status = .down(reason: reason, retryIn: backoff.current) }
                logger.notice("agent unreachable", metadata: ["agent": "\(name)", "reason": "\(reason)"])
            }
            try? await Task.sleep(for: backoff.next())
        }
        let client = state.withLockedValue { state -> AgentClient? in
            defer {
                state.client = nil
                state.status = .stopped
            }
            return state.client
        }
        await client?.close()
    }

    /// Clock probes over the connection until it closes or the task is cancelled.
    ///
    /// Over the UDP clock channel when the agent offers one. A channel that never answered is likely
    /// filtered and is left after 3 probes; one that answered is on a lossy path and is kept through
    /// bursts of up to 10 losses. Either way, while probing over TLS, every 16th probe tries UDP again,
    /// and the channel is taken back as soon as it answers: a path that lost datagrams for a while (a
    /// link cut, a relay restarting) must not leave the agent on the less accurate transport for the
    /// connection's lifetime.
    private func probe(_ client: AgentClient) async {
        var sent = 0
        let opened = await openClockChannel(client)
        var channel = opened
        var udpFailures = 0
        var udpAnswered = false
        // Samples without the kernel's transmit stamps, while the estimate rests on samples with them.
        var unstamped = 0
        while !Task.isCancelled {
            do {
                let sample: ClockSample
                let transport: ClockTransport
                let retry = channel == nil && opened != nil && sent % 16 == 15
                if let open = channel ?? (retry ? opened : nil) {
                    do {
                        let timeout = Duration.milliseconds(Int64(timing.probeTimeout.nanoseconds / 1_000_000))
                        var result = try await ClockChannelClient.shared.probe(open, agent: name, timeout: timeout)
                        if sent >= timing.initialProbes {
                            for _ in 1..<max(1, timing.probesPerRound) {
                                guard let again = try? await ClockChannelClient.shared.probe(open, agent: name, timeout: timeout) else { break }
                                if again.sample.roundTrip < result.sample.roundTrip, again.transmitStamped || !result.transmitStamped { result = again }
                            }
                        }
                        sample = result.sample
                        logger.trace("clock sample", metadata: ["agent": "\(name)", "t1": "\(sample.coordinatorTransmit)", "t2": "\(sample.agentReceive)", "t3": "\(sample.agentTransmit)", "t4": "\(sample.coordinatorReceive)", "rx": "\(result.receiveStamped)", "tx": "\(result.transmitStamped)", "offset": "\(sample.offset)", "rtt": "\(sample.roundTrip)"])
                        let receiveStamped = result.receiveStamped && open.kernelTimestamps
                        transport = receiveStamped && result.transmitStamped ? .udpKernelAll : receiveStamped ? .udpKernel : .udp
                        if channel == nil { logger.notice("UDP clock probes answered again; probing over UDP", metadata: ["agent": "\(name)"]) }
                        channel = open
                        udpFailures = 0
                        udpAnswered = true
                    } catch {
                        udpFailures += 1
                        if channel != nil, udpFailures >= (udpAnswered ? 10 : 3) {
                            logger.notice(
                                udpAnswered ? "UDP clock probes stopped getting answers; probing over the TLS connection" : "UDP clock probes get no answer (a firewall?); probing over the TLS connection",
                                metadata: ["agent": "\(name)"]
                            )
                            channel = nil
                        }
                        throw error
                    }
                } else {
                    sample = try await probeOnce(client)
                    transport = .tls
                }
                let added = state.withLockedValue { state -> Bool in
                    // A lost follow-up leaves one sample without transmit stamps: skipped, unless they stop coming.
                    if state.clockTransport == .udpKernelAll, transport == .udpKernel, unstamped < 8 {
                        unstamped += 1
                        return false
                    }
                    if transport == .udpKernelAll { unstamped = 0 }
                    if state.clockTransport != transport {
                        // Paths and stamps differ in their asymmetry: samples of two transports do not mix.
                        if state.clockTransport != nil { state.estimator.reset() }
                        state.clockTransport = transport
                    }
                    state.estimator.add(sample)
                    state.lastSeen = Date()
                    state.recentRoundTrips.append(sample.roundTrip)
                    if state.recentRoundTrips.count > 64 { state.recentRoundTrips.removeFirst() }
                    return true
                }
                if !added { logger.debug("clock sample without transmit stamps skipped", metadata: ["agent": "\(name)"]) }
            } catch {
                if Task.isCancelled { return }
                logger.debug("clock probe failed", metadata: ["agent": "\(name)", "error": "\(error)"])
            }
            sent += 1
            let settled = state.withLockedValue(\.clockSettled)
            let interval = sent < timing.initialProbes ? timing.initialProbeInterval
                : settled ? timing.probeInterval : min(timing.settlingProbeInterval, timing.probeInterval)
            try? await Task.sleep(for: interval)
        }
    }

    /// The agent's UDP clock channel, when it offers one and answers `OpenClockChannel`.
    private func openClockChannel(_ client: AgentClient) async -> ClockChannelClient.Channel? {
        guard timing.preferUDPClockChannel, client.welcome.capabilities.contains(WireProtocol.Capability.clockUDP), let remote = client.remoteAddress else { return nil }
        do {
            guard case .clockChannel(let wire) = try await client.request(.openClockChannel(WireOpenClockChannel())).frame.envelope.body else {
                throw AgentClientError(.protocolViolation, agent: name, "answered OpenClockChannel with something else")
            }
            return try ClockChannelClient.Channel(remote: remote, channel: wire)
        } catch {
            logger.notice("no UDP clock channel; probing over the TLS connection", metadata: ["agent": "\(name)", "error": "\(error)"])
            return nil
        }
    }

    /// One four-timestamp exchange: t1 and t4 are taken on the connection's event loop.
    func probeOnce(_ client: AgentClient) async throws -> ClockSample {
        var probe = WireClockProbe()
        probe.clientTransmitNs = HostClock.monotonicNow()
        let reply = try await client.request(.clockProbe(probe), timeout: timing.probeTimeout)
        guard case .clockProbeReply(let answer) = reply.frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: name, "answered a clock probe with \(reply.frame.envelope.messageName)")
        }
        return ClockSample(
            coordinatorTransmit: reply.sentAt,
            agentReceive: answer.agentReceiveNs,
            agentTransmit: answer.agentTransmitNs,
            coordinatorReceive: reply.receivedAt
        )
    }

    /// Notes that the agent answered something (any request counts as a sign of life).
    func noteSeen() {
        state.withLockedValue { $0.lastSeen = Date() }
    }
}

/// How an agent's clock is probed.
public enum ClockTransport: String, Sendable, Codable {
    /// Inside the TLS connection: t2 and t4 taken in the connection handlers.
    case tls
    /// The UDP clock channel, stamped when `recvmsg` returned.
    case udp
    /// The UDP clock channel with the kernel's receive timestamps for t2 and t4.
    case udpKernel = "udp-kernel"
    /// The UDP clock channel with the kernel's timestamps for all four: transmit stamps for t1 and t3
    /// (t3 in the agent's follow-up), receive stamps for t2 and t4.
    case udpKernelAll = "udp-kernel-tx-rx"
}

import CamRigViews
import Foundation

/// What the service is doing that excludes the others: one at a time, and none while another runs.
public enum RigActivity: Sendable, Equatable, CustomStringConvertible {
    case rebuildingSession
    case relocking
    case changingSettings(device: String)
    case capturing(job: String, kind: JobKind)

    public var description: String {
        switch self {
        case .rebuildingSession: "a rebuild of the session"
        case .relocking: "a phase lock"
        case .changingSettings(let device): "a settings change on \(device)"
        case .capturing(let job, let kind): "a \(kind.rawValue) (\(job))"
        }
    }
}

/// The service's decisions about the rig, without I/O: a snapshot of the rig goes in, actions come out
/// (connect nothing, rebuild the session over these cameras, lock the phase again, publish these events).
/// `RigService` runs the actions and reports how they went.
///
/// The session is in one of two states (none, with when to try again; or committed over its cameras and
/// the agents' connection times). One activity at most runs at a time (`RigActivity`): a rebuild, a
/// relock, a settings change or a capture; `begin` refuses a second.
struct RigSupervisor {
    /// An agent as the supervisor sees it.
    struct AgentObservation: Equatable, Sendable {
        var name: String
        var endpoint: String
        /// `connecting`, `connected`, `down` or `stopped`.
        var status: String
        /// Why it is down.
        var reason: String?
        /// When its connection (the one the session was built over, if any) opened.
        var connectedSince: Date?
    }

    /// A camera as the supervisor sees it.
    struct DeviceObservation: Equatable, Sendable {
        var name: String
        var agent: String
        var localizedName: String
        var connected: Bool
        var lease: String?
        /// Its phase-lock state (`unlocked` outside a locked session).
        var phase: String
    }

    struct Snapshot: Sendable {
        var agents: [AgentObservation]
        var devices: [DeviceObservation]
        var now: ContinuousClock.Instant
    }

    enum SessionState: Equatable, Sendable {
        /// No session; the next build is tried from `retryAt` on (nil: as soon as there are cameras).
        case none(retryAt: ContinuousClock.Instant?)
        /// A session over `inputs`, built while each agent of `agents` had the connection opened then;
        /// a relock is due at `relockAt` when the last one failed.
        case committed(inputs: Set<String>, agents: [String: Date], relockAt: ContinuousClock.Instant?)
    }

    enum Action: Equatable, Sendable {
        case emit(ServiceEvent)
        /// Stop the session (if any) and build one over these cameras; report with `sessionCommitted` or
        /// `sessionFailed`.
        case rebuildSession(cameras: Set<String>)
        /// Lock the cameras' phase again; report with `relocked` or `relockFailed`, then `end(.relocking)`.
        case relock
    }

    struct Configuration: Sendable {
        var rebuildBackoff: Duration = .seconds(5)
        var relockInterval: Duration = .seconds(10)
    }

    let configuration: Configuration
    private(set) var session: SessionState = .none(retryAt: nil)
    private(set) var activity: RigActivity?
    /// Why the session is missing a camera or is not locked, for a person.
    private(set) var sessionError: String?
    /// Each agent's status as last seen, by endpoint.
    private var agentStatus: [String: String] = [:]
    private var devicesSeen: [String: DeviceObservation] = [:]

    init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    // MARK: Observing the rig

    /// One look at the rig: the events of what changed since the last look, and what to do next.
    mutating func observe(_ snapshot: Snapshot) -> [Action] {
        var actions = agentEvents(snapshot.agents).map(Action.emit) + deviceEvents(snapshot.devices).map(Action.emit)
        guard activity == nil else { return actions }
        let wanted = Set(snapshot.devices.filter(\.connected).map(\.name))
        var connectedSince: [String: Date] = [:]
        for agent in snapshot.agents where agent.status == "connected" {
            if let since = agent.connectedSince { connectedSince[agent.name] = since }
        }
        switch session {
        case .none(let retryAt):
            if !wanted.isEmpty, retryAt.map({ snapshot.now >= $0 }) ?? true {
                activity = .rebuildingSession
                actions.append(.rebuildSession(cameras: wanted))
            }
        case .committed(let inputs, let agents, let relockAt):
            // An agent that reconnected forgot the session's leases: the session is built anew.
            let agentsChanged = agents.contains { name, since in connectedSince[name] != since }
            if wanted != inputs || agentsChanged {
                activity = .rebuildingSession
                actions.append(.rebuildSession(cameras: wanted))
            } else if let relockAt, snapshot.now >= relockAt {
                activity = .relocking
                actions.append(.relock)
            }
        }
        return actions
    }

    private mutating func agentEvents(_ agents: [AgentObservation]) -> [ServiceEvent] {
        var events: [ServiceEvent] = []
        for agent in agents where agentStatus[agent.endpoint] != agent.status {
            let previous = agentStatus[agent.endpoint]
            agentStatus[agent.endpoint] = agent.status
            if agent.status == "connected" {
                events.append(.agentUp(agent: agent.name, endpoint: agent.endpoint))
            } else if previous == "connected" || (previous == nil && agent.status == "down") {
                events.append(.agentDown(agent: agent.name, status: agent.status, reason: agent.reason))
            }
        }
        return events
    }

    private mutating func deviceEvents(_ devices: [DeviceObservation]) -> [ServiceEvent] {
        var events: [ServiceEvent] = []
        var seen: [String: DeviceObservation] = [:]
        for device in devices {
            seen[device.name] = device
            guard let before = devicesSeen[device.name] else {
                events.append(.deviceAdded(agent: device.agent, device: device.name, localizedName: device.localizedName))
                continue
            }
            if before.connected != device.connected {
                events.append(
                    device.connected ? .deviceConnected(agent: device.agent, device: device.name) : .deviceDisconnected(agent: device.agent, device: device.name))
            }
            if before.lease != device.lease { events.append(.deviceLease(agent: device.agent, device: device.name, holder: device.lease)) }
            if before.phase != device.phase { events.append(.phaseState(agent: device.agent, device: device.name, state: device.phase)) }
        }
        for name in devicesSeen.keys.sorted() where seen[name] == nil { events.append(.deviceRemoved(device: name)) }
        devicesSeen = seen
        return events
    }

    // MARK: Outcomes

    /// The session was committed over `added` (`skipped` say why the others could not join).
    mutating func sessionCommitted(id: String, added: [String], skipped: [String], agents: [String: Date]) -> [Action] {
        session = .committed(inputs: Set(added), agents: agents, relockAt: nil)
        sessionError = skipped.isEmpty ? nil : "left out: " + skipped.joined(separator: "; ")
        end(.rebuildingSession)
        return [.emit(.sessionCommitted(session: id, cameras: added.count, leftOut: skipped))]
    }

    /// The session could not be built: there is none until the backoff has passed.
    mutating func sessionFailed(reason: String, now: ContinuousClock.Instant) -> [Action] {
        session = .none(retryAt: now + configuration.rebuildBackoff)
        sessionError = reason
        end(.rebuildingSession)
        return [.emit(.sessionFailed(reason: reason))]
    }

    /// The session was stopped for good (service shutdown).
    mutating func sessionStopped() {
        session = .none(retryAt: nil)
    }

    /// The cameras are on the frame grid again.
    mutating func relocked() -> [Action] {
        guard case .committed(let inputs, let agents, let relockAt) = session else { return [] }
        session = .committed(inputs: inputs, agents: agents, relockAt: nil)
        if sessionError?.hasPrefix("phase lock lost") == true { sessionError = nil }
        return relockAt == nil ? [] : [.emit(.phaseRelocked)]
    }

    /// The cameras could not be locked again: captures meanwhile are taken unlocked, and the next
    /// relock is due after `relockInterval`.
    mutating func relockFailed(reason: String, now: ContinuousClock.Instant) -> [Action] {
        guard case .committed(let inputs, let agents, let relockAt) = session else { return [] }
        session = .committed(inputs: inputs, agents: agents, relockAt: now + configuration.relockInterval)
        sessionError = "phase lock lost after a change: \(reason)"
        return relockAt == nil ? [.emit(.phaseFailed(reason: reason))] : []
    }

    // MARK: Mutual exclusion

    /// Starts `activity`, or says what is under way instead.
    mutating func begin(_ activity: RigActivity) -> String? {
        if let current = self.activity { return "\(current) is under way" }
        self.activity = activity
        return nil
    }

    /// Ends `activity` (nothing when another is under way).
    mutating func end(_ activity: RigActivity) {
        if self.activity == activity { self.activity = nil }
    }
}

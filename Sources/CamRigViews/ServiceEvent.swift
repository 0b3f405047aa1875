import Foundation

/// Something that happened on the rig, as the console and scripts see it (`/api/v1/events`).
///
/// On the wire an event is one flat JSON object (`ServiceEventRecord`): its `kind`, the agent and camera
/// concerned, a line for a person, and its details as strings in `data`.
public enum ServiceEvent: Sendable, Equatable {
    case serviceStarted(agents: Int)
    case serviceStopped
    case agentUp(agent: String, endpoint: String)
    case agentDown(agent: String, status: String, reason: String?)
    /// A host joined the rig with a join token (`camrig-agent --enroll`), serving at `endpoint`.
    case agentEnrolled(agent: String, endpoint: String)
    /// An enrolled agent renewed its certificate (serving at `endpoint`, which may be new).
    case agentRenewed(agent: String, endpoint: String)
    /// An enrolled agent's certificate was revoked: it left the rig.
    case agentRevoked(agent: String)
    /// An enrollment or renewal (`what`) from `address` was refused.
    case enrollmentRefused(what: String, address: String, reason: String)
    case deviceAdded(agent: String, device: String, localizedName: String)
    case deviceRemoved(device: String)
    case deviceConnected(agent: String, device: String)
    case deviceDisconnected(agent: String, device: String)
    case deviceLease(agent: String, device: String, holder: String?)
    case deviceSettings(agent: String, device: String, settings: String, by: String)
    case phaseState(agent: String, device: String, state: String)
    case phaseRelocked
    case phaseFailed(reason: String)
    case sessionCommitted(session: String, cameras: Int, leftOut: [String])
    case sessionFailed(reason: String)
    case captureStarted(job: String, kind: JobKind, by: String)
    case captureProgress(job: String, progress: Double, message: String)
    case captureFinished(job: String, kind: JobKind, capture: String, contactSheet: String?, summary: String)
    case captureFailed(job: String, kind: JobKind, reason: String)

    /// The event's kind as the API names it.
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case serviceStarted = "service.started"
        case serviceStopped = "service.stopped"
        case agentUp = "agent.up"
        case agentDown = "agent.down"
        case agentEnrolled = "agent.enrolled"
        case agentRenewed = "agent.renewed"
        case agentRevoked = "agent.revoked"
        case enrollmentRefused = "enrollment.refused"
        case deviceAdded = "device.added"
        case deviceRemoved = "device.removed"
        case deviceConnected = "device.connected"
        case deviceDisconnected = "device.disconnected"
        case deviceLease = "device.lease"
        case deviceSettings = "device.settings"
        case phaseState = "phase.state"
        case phaseRelocked = "phase.relocked"
        case phaseFailed = "phase.failed"
        case sessionCommitted = "session.committed"
        case sessionFailed = "session.failed"
        case captureStarted = "capture.started"
        case captureProgress = "capture.progress"
        case captureFinished = "capture.finished"
        case captureFailed = "capture.failed"
    }

    public var kind: Kind {
        switch self {
        case .serviceStarted: .serviceStarted
        case .serviceStopped: .serviceStopped
        case .agentUp: .agentUp
        case .agentDown: .agentDown
        case .agentEnrolled: .agentEnrolled
        case .agentRenewed: .agentRenewed
        case .agentRevoked: .agentRevoked
        case .enrollmentRefused: .enrollmentRefused
        case .deviceAdded: .deviceAdded
        case .deviceRemoved: .deviceRemoved
        case .deviceConnected: .deviceConnected
        case .deviceDisconnected: .deviceDisconnected
        case .deviceLease: .deviceLease
        case .deviceSettings: .deviceSettings
        case .phaseState: .phaseState
        case .phaseRelocked: .phaseRelocked
        case .phaseFailed: .phaseFailed
        case .sessionCommitted: .sessionCommitted
        case .sessionFailed: .sessionFailed
        case .captureStarted: .captureStarted
        case .captureProgress: .captureProgress
        case .captureFinished: .captureFinished
        case .captureFailed: .captureFailed
        }
    }

    /// The agent concerned.
    public var agent: String? {
        switch self {
        case .agentUp(let agent, _), .agentDown(let agent, _, _), .agentEnrolled(let agent, _), .agentRenewed(let agent, _), .agentRevoked(let agent),
            .deviceAdded(let agent, _, _), .deviceConnected(let agent, _),
            .deviceDisconnected(let agent, _), .deviceLease(let agent, _, _), .deviceSettings(let agent, _, _, _), .phaseState(let agent, _, _):
            agent
        default: nil
        }
    }

    /// The camera concerned, AGENT/DEVICE.
    public var device: String? {
        switch self {
        case .deviceAdded(_, let device, _), .deviceRemoved(let device), .deviceConnected(_, let device), .deviceDisconnected(_, let device),
            .deviceLease(_, let device, _), .deviceSettings(_, let device, _, _), .phaseState(_, let device, _):
            device
        default: nil
        }
    }

    /// One line for a person.
    public var message: String {
        switch self {
        case .serviceStarted(let agents): "coordinator service started with \(agents) agent(s)"
        case .serviceStopped: "coordinator service stopped"
        case .agentUp(let agent, let endpoint): "agent \(agent) connected (\(endpoint))"
        case .agentDown(let agent, let status, let reason): "agent \(agent) is \(status)" + (reason.map { ": \($0)" } ?? "")
        case .agentEnrolled(let agent, let endpoint): "agent \(agent) joined the rig with a join token (\(endpoint))"
        case .agentRenewed(let agent, let endpoint): "agent \(agent) renewed its certificate (\(endpoint))"
        case .agentRevoked(let agent): "agent \(agent) left the rig: its certificate was revoked"
        case .enrollmentRefused(let what, let address, let reason): "\(what) from \(address) refused: \(reason)"
        case .deviceAdded(_, let device, let localizedName): "camera \(device) (\(localizedName)) is on the rig"
        case .deviceRemoved(let device): "camera \(device) is no longer on the rig (its agent is down or it was removed)"
        case .deviceConnected(_, let device): "camera \(device) was plugged in"
        case .deviceDisconnected(_, let device): "camera \(device) was unplugged"
        case .deviceLease(_, let device, let holder):
            holder.map { "camera \(device) is locked for configuration by \($0)" } ?? "camera \(device) is unlocked"
        case .deviceSettings(_, let device, let settings, let by): "\(by) set \(settings) on \(device)"
        case .phaseState(_, let device, let state): "camera \(device) phase lock: \(state)"
        case .phaseRelocked: "the cameras are phase-locked again"
        case .phaseFailed(let reason): "the cameras could not be phase-locked again after a change: \(reason); retrying every 10 s"
        case .sessionCommitted(let session, let cameras, let leftOut):
            "session \(session) committed over \(cameras) camera(s)" + (leftOut.isEmpty ? "" : "; left out: \(leftOut.joined(separator: "; "))")
        case .sessionFailed(let reason): "the session could not be committed: \(reason)"
        case .captureStarted(_, let kind, let by): "\(by) started a \(kind.rawValue)"
        case .captureProgress(_, _, let message): message
        case .captureFinished(_, let kind, let capture, _, let summary): "\(kind.rawValue) \(capture) finished: \(summary)"
        case .captureFailed(_, let kind, let reason): "\(kind.rawValue) failed: \(reason)"
        }
    }

    /// Details by name (capture id, progress, lock state…), the keys each kind has always.
    public var data: [String: String] {
        switch self {
        case .agentEnrolled(_, let endpoint), .agentRenewed(_, let endpoint): ["endpoint": endpoint]
        case .enrollmentRefused(let what, let address, _): ["what": what, "address": address]
        case .deviceLease(_, _, let holder): ["holder": holder ?? ""]
        case .deviceSettings(_, _, let settings, let by): ["settings": settings, "by": by]
        case .phaseState(_, _, let state): ["state": state]
        case .sessionCommitted(let session, let cameras, _): ["session": session, "cameras": "\(cameras)"]
        case .captureStarted(let job, let kind, _): ["job": job, "kind": kind.rawValue]
        case .captureProgress(let job, let progress, _): ["job": job, "progress": Self.fraction(progress)]
        case .captureFinished(let job, let kind, let capture, let contactSheet, _):
            ["job": job, "capture": capture, "kind": kind.rawValue, "contact_sheet": contactSheet ?? ""]
        case .captureFailed(let job, let kind, _): ["job": job, "kind": kind.rawValue]
        default: [:]
        }
    }

    /// The `data` keys of each kind, as `data` writes them.
    public static func dataKeys(of kind: Kind) -> Set<String> {
        switch kind {
        case .agentEnrolled, .agentRenewed: ["endpoint"]
        case .enrollmentRefused: ["what", "address"]
        case .deviceLease: ["holder"]
        case .deviceSettings: ["settings", "by"]
        case .phaseState: ["state"]
        case .sessionCommitted: ["session", "cameras"]
        case .captureStarted, .captureFailed: ["job", "kind"]
        case .captureProgress: ["job", "progress"]
        case .captureFinished: ["job", "capture", "kind", "contact_sheet"]
        default: []
        }
    }

    static func fraction(_ value: Double) -> String {
        // Three decimals, as "%.3f" gives, without Foundation.
        let thousandths = Int((value * 1000).rounded())
        let whole = thousandths / 1000
        let rest = abs(thousandths % 1000)
        return "\(whole)." + String(repeating: "0", count: 3 - String(rest).count) + String(rest)
    }
}

/// An event as the service publishes it: numbered, stamped, and flat (`kind`, `agent`, `device`,
/// `message`, `data`), the shape `/api/v1/events` and `/api/v1/events/recent` give.
public struct ServiceEventRecord: Codable, Sendable, Equatable {
    /// Increases by one with each event of this service.
    public var sequence: UInt64
    /// ISO 8601, when the service saw it.
    public var time: String
    public var event: ServiceEvent

    public var kind: ServiceEvent.Kind { event.kind }
    public var agent: String? { event.agent }
    public var device: String? { event.device }
    public var message: String { event.message }
    public var data: [String: String] { event.data }

    public init(sequence: UInt64, time: String, event: ServiceEvent) {
        self.sequence = sequence
        self.time = time
        self.event = event
    }

    enum CodingKeys: String, CodingKey { case sequence, time, kind, agent, device, message, data }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sequence, forKey: .sequence)
        try container.encode(time, forKey: .time)
        try container.encode(event.kind, forKey: .kind)
        try container.encodeIfPresent(event.agent, forKey: .agent)
        try container.encodeIfPresent(event.device, forKey: .device)
        try container.encode(event.message, forKey: .message)
        try container.encode(event.data, forKey: .data)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sequence = try container.decode(UInt64.self, forKey: .sequence)
        time = try container.decode(String.self, forKey: .time)
        let kind = try container.decode(ServiceEvent.Kind.self, forKey: .kind)
        let agent = try container.decodeIfPresent(String.self, forKey: .agent) ?? ""
        let device = try container.decodeIfPresent(String.self, forKey: .device) ?? ""
        let message = try container.decode(String.self, forKey: .message)
        let data = try container.decodeIfPresent([String: String].self, forKey: .data) ?? [:]
        // A decoder converting snake_case keys converts those of `data` too.
        let field = { (key: String) in data[key] ?? data[key.split(separator: "_").enumerated().map { $0 == 0 ? String($1) : $1.capitalized }.joined()] ?? "" }
        let jobKind = JobKind(rawValue: field("kind")) ?? .photo
        // The parts a message alone carries are read back from it after its fixed prefix.
        func after(_ separator: String) -> String {
            guard let range = message.range(of: separator) else { return message }
            return String(message[range.upperBound...])
        }
        switch kind {
        case .serviceStarted: event = .serviceStarted(agents: Int(message.split(separator: " ").first { Int($0) != nil } ?? "0") ?? 0)
        case .serviceStopped: event = .serviceStopped
        case .agentUp:
            event = .agentUp(agent: agent, endpoint: String(after("(").dropLast()))
        case .agentDown:
            let rest = after(" is ")
            let parts = rest.split(separator: ":", maxSplits: 1).map { $0.trimmingPrefix(" ") }
            event = .agentDown(agent: agent, status: parts.first.map(String.init) ?? rest, reason: parts.count > 1 ? String(parts[1]) : nil)
        case .agentEnrolled: event = .agentEnrolled(agent: agent, endpoint: field("endpoint"))
        case .agentRenewed: event = .agentRenewed(agent: agent, endpoint: field("endpoint"))
        case .agentRevoked: event = .agentRevoked(agent: agent)
        case .enrollmentRefused: event = .enrollmentRefused(what: field("what"), address: field("address"), reason: after(" refused: "))
        case .deviceAdded:
            let name = after("(")
            event = .deviceAdded(agent: agent, device: device, localizedName: String(name.prefix { $0 != ")" }))
        case .deviceRemoved: event = .deviceRemoved(device: device)
        case .deviceConnected: event = .deviceConnected(agent: agent, device: device)
        case .deviceDisconnected: event = .deviceDisconnected(agent: agent, device: device)
        case .deviceLease: event = .deviceLease(agent: agent, device: device, holder: field("holder").isEmpty ? nil : field("holder"))
        case .deviceSettings: event = .deviceSettings(agent: agent, device: device, settings: field("settings"), by: field("by"))
        case .phaseState: event = .phaseState(agent: agent, device: device, state: field("state"))
        case .phaseRelocked: event = .phaseRelocked
        case .phaseFailed:
            let reason = after("after a change: ")
            event = .phaseFailed(reason: reason.hasSuffix("; retrying every 10 s") ? String(reason.dropLast("; retrying every 10 s".count)) : reason)
        case .sessionCommitted:
            let leftOut = message.range(of: "; left out: ").map { String(message[$0.upperBound...]).components(separatedBy: "; ") } ?? []
            event = .sessionCommitted(session: field("session"), cameras: Int(field("cameras")) ?? 0, leftOut: leftOut)
        case .sessionFailed: event = .sessionFailed(reason: after("could not be committed: "))
        case .captureStarted:
            event = .captureStarted(job: field("job"), kind: jobKind, by: String(message.dropLast(" started a \(jobKind.rawValue)".count)))
        case .captureProgress: event = .captureProgress(job: field("job"), progress: Double(field("progress")) ?? 0, message: message)
        case .captureFinished:
            event = .captureFinished(
                job: field("job"), kind: jobKind, capture: field("capture"), contactSheet: field("contact_sheet").isEmpty ? nil : field("contact_sheet"),
                summary: after(" finished: "))
        case .captureFailed: event = .captureFailed(job: field("job"), kind: jobKind, reason: after(" failed: "))
        }
    }
}

import CamRigDeviceModel
import CamRigWire
import CamRigWireModel

/// A camera of the rig: a device on one agent (AVFoundation's `AVCaptureDevice`, seen from afar).
public struct RigDevice: Sendable {
    public let agent: RemoteAgent
    /// The agent's id for it, as announced.
    public let agentID: String
    public var description: WireDeviceDescription

    public init(agent: RemoteAgent, agentID: String, description: WireDeviceDescription) {
        self.agent = agent
        self.agentID = agentID
        self.description = description
    }

    public var deviceID: String { description.uniqueID }
    /// `AGENT/DEVICE`: unique across the rig, how every message and file names the camera.
    public var name: String { "\(agentID)/\(deviceID)" }

    /// The formats in the device model (formats whose ranges do not parse keep the ranges that do).
    public var formats: [DeviceFormat] {
        description.formats.map { format in
            DeviceFormat(
                pixelFormat: format.pixelFormatValue,
                dimensions: format.dimensions.dimensions,
                frameRateRanges: format.rateRanges,
                supportedPhotoDimensions: format.supportedPhotoDimensions.map(\.dimensions),
                maxZoomFactor: format.maxZoomFactor
            )
        }
    }

    /// The active format, if the agent reported one this coordinator understands.
    public var activeFormat: WireFormat? {
        description.formats.first { $0.id == description.state.activeFormatID }
    }
}

/// Looks up devices across every connected agent (AVFoundation's `DiscoverySession`, rig-wide).
public enum RigDiscovery {
    /// Devices of every connected agent, agents in pool order, each agent's devices in its order
    /// (with a query: ordered by the requested device types, as the agent answers a `DiscoveryQuery`).
    ///
    /// - Returns: the devices, and the agents that could not answer with why.
    public static func devices(in pool: AgentPool, query: WireDiscoveryQuery? = nil) async -> (devices: [RigDevice], failures: [(agent: String, error: String)]) {
        // One reading of the pool's agents: agents may join or leave the pool meanwhile.
        await devices(of: pool.agents, query: query)
    }

    /// Devices of `agents` (those connected), in their order, each agent's devices in its order.
    public static func devices(of agents: [RemoteAgent], query: WireDiscoveryQuery? = nil) async -> (devices: [RigDevice], failures: [(agent: String, error: String)]) {
        let answers = await withTaskGroup(of: (Int, Result<[RigDevice], any Error>).self) { group in
            for (index, agent) in agents.enumerated() {
                group.addTask {
                    do {
                        let client = try agent.client()
                        let reply = try await client.request(query.map { .discoveryQuery($0) } ?? .listDevices(WireListDevices()))
                        guard case .deviceList(let list) = reply.frame.envelope.body else {
                            throw AgentClientError(.protocolViolation, agent: agent.name, "answered a device query with \(reply.frame.envelope.messageName)")
                        }
                        agent.noteSeen()
                        return (index, .success(list.devices.map { RigDevice(agent: agent, agentID: client.welcome.agentID, description: $0) }))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var answers: [(Int, Result<[RigDevice], any Error>)] = []
            for await answer in group { answers.append(answer) }
            return answers.sorted { $0.0 < $1.0 }
        }
        var devices: [RigDevice] = []
        var failures: [(agent: String, error: String)] = []
        for (index, result) in answers {
            switch result {
            case .success(let found): devices += found
            case .failure(let error): failures.append((agents[index].name, "\(error)"))
            }
        }
        return (devices, failures)
    }

    /// The device named `AGENT/DEVICE` (or just `DEVICE` when only one agent has it).
    public static func find(_ name: String, in devices: [RigDevice]) -> RigDevice? {
        if let exact = devices.first(where: { $0.name == name }) { return exact }
        let matches = devices.filter { $0.deviceID == name }
        return matches.count == 1 ? matches[0] : nil
    }
}

import CamRigWire

/// Answers requests other than the ones served on the connection's fast path (ping, clock probe).
///
/// Authorization by role comes first. Past it, this agent has no device layer yet: every device, lease,
/// stream, trigger and spool request is answered with `UNIMPLEMENTED`, naming the request, so clients
/// learn it at once instead of waiting for a reply that never comes.
struct AgentRequestRouter: Sendable {
    let agentID: String
    let devices: AgentDevices?

    /// Answers `frame` through `reply`, now or later (device requests run off the event loop).
    func route(
        _ frame: WireFrame,
        client: ServerConnectionStateMachine.Client,
        connection: UInt64,
        reply: @escaping @Sendable (WireFrame) -> Void
    ) {
        let requestID = frame.requestID
        guard let body = frame.envelope.body else { return }
        if !client.role.mayRequest(body) {
            var error = WireError()
            error.agentID = agentID
            error.code = .permissionDenied
            error.message = "'\(client.name)' has a \(client.role.roleName) certificate, which may not send \(body.messageName) to agent \(agentID); use a coordinator certificate"
            reply(WireFrame(requestID: requestID, .error(error)))
            return
        }
        if let devices, Self.isDeviceRequest(body) {
            devices.handle(body, client: client, connection: connection) { answer in
                reply(WireFrame(requestID: requestID, answer))
            }
            return
        }
        var error = WireError()
        error.agentID = agentID
        error.code = .unimplemented
        error.message = "agent \(agentID) (camrig-agent \(CamRigVersion.string)) does not serve \(body.messageName) yet"
        reply(WireFrame(requestID: requestID, .error(error)))
    }

    static func isDeviceRequest(_ body: WireEnvelope.OneOf_Body) -> Bool {
        switch body {
        case .listDevices, .discoveryQuery, .describeDevice, .lock, .renewLease, .unlock, .configure: true
        default: false
        }
    }

    func connectionClosed(_ connection: UInt64) {
        devices?.connectionClosed(connection)
    }
}

extension WirePeerRole {
    /// The role as certificates spell it.
    var roleName: String {
        switch self {
        case .agent: "agent"
        case .coordinator: "coordinator"
        case .viewer: "viewer"
        case .unspecified, .UNRECOGNIZED: "role-less"
        }
    }
}

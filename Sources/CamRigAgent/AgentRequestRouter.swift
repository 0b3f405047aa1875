import CamRigWire

/// Answers requests other than the ones served on the connection's fast path (ping, clock probe).
///
/// Authorization by role comes first. Past it, this agent has no device layer yet: every device, lease,
/// stream, trigger and spool request is answered with `UNIMPLEMENTED`, naming the request, so clients
/// learn it at once instead of waiting for a reply that never comes.
struct AgentRequestRouter: Sendable {
    let agentID: String

    func reply(to frame: WireFrame, client: ServerConnectionStateMachine.Client?) -> WireFrame {
        var error = WireError()
        error.agentID = agentID
        let request = frame.envelope.messageName
        if let client, let body = frame.envelope.body, !client.role.mayRequest(body) {
            error.code = .permissionDenied
            error.message = "'\(client.name)' has a \(client.role.roleName) certificate, which may not send \(request) to agent \(agentID); use a coordinator certificate"
        } else {
            error.code = .unimplemented
            error.message = "agent \(agentID) (camrig-agent \(CamRigVersion.string)) does not serve \(request) yet"
        }
        return WireFrame(requestID: frame.requestID, .error(error))
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

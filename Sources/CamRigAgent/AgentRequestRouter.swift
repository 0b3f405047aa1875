import CamRigWire

/// Answers requests other than the ones served on the connection's fast path (ping, clock probe).
///
/// This protocol version's agent has no device layer yet: every device, lease, stream, trigger and spool
/// request is answered with `UNIMPLEMENTED`, naming the request, so clients learn it at once instead of
/// waiting for a reply that never comes.
struct AgentRequestRouter: Sendable {
    let agentID: String

    func reply(to frame: WireFrame, client: ServerConnectionStateMachine.Client?) -> WireFrame {
        var error = WireError()
        error.code = .unimplemented
        error.agentID = agentID
        error.message = "agent \(agentID) (camrig-agent \(CamRigVersion.string)) does not serve \(frame.envelope.messageName) yet"
        return WireFrame(requestID: frame.requestID, .error(error))
    }
}

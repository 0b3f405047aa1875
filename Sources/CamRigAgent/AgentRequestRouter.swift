import CamRigWire
import CamRigWireModel
import NIOCore

/// Answers requests other than the ones served on the connection's fast path (ping, clock probe).
///
/// Authorization by role comes first. Past it, this agent has no device layer yet: every device, lease,
/// stream, trigger and spool request is answered with `UNIMPLEMENTED`, naming the request, so clients
/// learn it at once instead of waiting for a reply that never comes.
struct AgentRequestRouter: Sendable {
    let agentID: String
    let devices: AgentDevices?
    let streams: AgentStreams?
    let capture: AgentCapture?
    let clockChannel: ClockChannelServer?

    init(agentID: String, devices: AgentDevices?, streams: AgentStreams? = nil, capture: AgentCapture? = nil, clockChannel: ClockChannelServer? = nil) {
        self.clockChannel = clockChannel
        self.agentID = agentID
        self.devices = devices
        self.streams = streams
        self.capture = capture
    }

    /// Where a connection's answers go: its event loop and a way to write (with a completion promise).
    struct Connection: Sendable {
        var id: UInt64
        var eventLoop: any EventLoop
        var write: @Sendable (WireFrame, EventLoopPromise<Void>?) -> Void
    }

    /// Answers `frame` on `connection`, now or later (device work runs off the event loop).
    func route(_ frame: WireFrame, client: ServerConnectionStateMachine.Client, connection: Connection) {
        let reply: @Sendable (WireFrame) -> Void = { connection.write($0, nil) }
        let requestID = frame.requestID
        if case .openClockChannel = frame.envelope.body, let body = frame.envelope.body, client.role.mayRequest(body) {
            if let channel = clockChannel?.open(connection: connection.id) {
                reply(WireFrame(requestID: requestID, .clockChannel(channel)))
            } else {
                var error = WireError()
                error.agentID = agentID
                error.code = .unsupported
                error.message = "agent \(agentID) has no UDP clock channel (see its log); probe over this connection instead"
                reply(WireFrame(requestID: requestID, .error(error)))
            }
            return
        }
        if let streams, let devices, let body = frame.envelope.body, client.role.mayRequest(body) {
            switch body {
            case .startStream(let start):
                let subscriber = StreamSubscriber(
                    requestID: requestID,
                    connection: connection.id,
                    maxQueued: start.maxQueuedFrames == 0 ? 4 : Int(min(start.maxQueuedFrames, 64)),
                    eventLoop: connection.eventLoop,
                    write: connection.write
                )
                devices.queue.async {
                    switch streams.start(deviceID: start.deviceID, subscriber: subscriber) {
                    case .started(_, let format): subscriber.open(format: format)
                    case .failed(let error): reply(WireFrame(requestID: requestID, .error(error)))
                    }
                }
                return
            case .stopStream(let stop):
                devices.queue.async {
                    guard streams.owner(of: stop.streamID) == connection.id else {
                        var error = WireError()
                        error.code = .notFound
                        error.agentID = agentID
                        error.message = "no stream '\(stop.streamID)' on this connection"
                        reply(WireFrame(requestID: requestID, .error(error)))
                        return
                    }
                    reply(WireFrame(requestID: requestID, .ok(WireOk())))
                    streams.stop(streamID: stop.streamID, reason: .stopped)
                }
                return
            case .subscribe(let subscribe):
                devices.events.subscribe(connection: connection.id, requestID: requestID, kinds: subscribe.kinds) { connection.write($0, nil) }
                reply(WireFrame(requestID: requestID, .ok(WireOk())))
                return
            case .capturePhoto, .scheduleTrigger, .fetchResults, .acknowledgeResults:
                guard let capture else { break }
                capture.handle(body, requestID: requestID, connection: connection) { answer, payload in
                    connection.write(WireFrame(requestID: requestID, answer, payload: payload), nil)
                }
                return
            default:
                break
            }
        }
        route(frame, client: client, connection: connection.id, reply: reply)
    }

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
        clockChannel?.connectionClosed(connection)
        devices?.events.connectionClosed(connection)
        streams?.connectionClosed(connection)
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

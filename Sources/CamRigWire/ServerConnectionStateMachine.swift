/// The agent's side of one connection: handshake → ready → closing → closed.
///
/// Pure: it holds no channel and reads no clock. The connection handler feeds it events and performs the
/// `Action` each one returns. Every protocol violation turns into an `Error` for the peer and a close.
public struct ServerConnectionStateMachine: Sendable {
    /// What the agent announces in its `Welcome`.
    public struct Configuration: Sendable {
        public var agentID: String
        public var agentSoftware: String
        public var capabilities: [String]
        public var supportedVersions: ClosedRange<UInt32>
        public var maxFrameLength: UInt32

        public init(
            agentID: String,
            agentSoftware: String,
            capabilities: [String] = [WireProtocol.Capability.ping, WireProtocol.Capability.clockProbe],
            supportedVersions: ClosedRange<UInt32> = WireProtocol.supportedVersions,
            maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength
        ) {
            self.agentID = agentID
            self.agentSoftware = agentSoftware
            self.capabilities = capabilities
            self.supportedVersions = supportedVersions
            self.maxFrameLength = maxFrameLength
        }
    }

    /// Who the client is, as read from its certificate (or declared for an insecure connection).
    public struct Client: Sendable, Hashable {
        public var role: WirePeerRole
        public var name: String

        public init(role: WirePeerRole, name: String) {
            self.role = role
            self.name = name
        }
    }

    /// What the handler must do.
    public enum Action: Sendable {
        /// Nothing.
        case none
        /// Write this frame.
        case send(WireFrame)
        /// Write this frame (an error or goodbye), flush, then close the connection.
        case sendAndClose(WireFrame, reason: WireProtocolError?)
        /// Write the welcome; the connection is now ready with the negotiated limits.
        case completeHandshake(WireFrame, protocolVersion: UInt32, clientMaxFrameLength: UInt32)
        /// Hand this request to the agent's request handling.
        case deliver(WireFrame)
        /// Close without writing (the peer said goodbye or is gone).
        case close
    }

    enum State: Sendable, Equatable {
        case awaitingHello
        case ready(protocolVersion: UInt32)
        case closing
        case closed
    }

    public let configuration: Configuration
    public let client: Client
    private(set) var state: State = .awaitingHello

    public init(configuration: Configuration, client: Client) {
        self.configuration = configuration
        self.client = client
    }

    /// Whether the handshake completed and the connection is not closing.
    public var isReady: Bool {
        if case .ready = state { return true }
        return false
    }

    /// The negotiated protocol version, once ready.
    public var protocolVersion: UInt32? {
        if case .ready(let version) = state { return version }
        return nil
    }

    /// A frame arrived. `agentClockNanoseconds` is the agent's monotonic clock now (for the Welcome).
    public mutating func frameReceived(_ frame: WireFrame, agentClockNanoseconds: Int64) -> Action {
        switch state {
        case .closing, .closed:
            return .none

        case .awaitingHello:
            guard case .hello(let hello) = frame.envelope.body else {
                return fail(
                    WireProtocolError(
                        .unexpectedMessage,
                        "expected hello as the first message, got \(frame.envelope.messageName)",
                        requestID: frame.requestID
                    )
                )
            }
            guard frame.requestID != 0 else {
                return fail(WireProtocolError(.invalidRequestID, "hello has request_id 0; requests need a non-zero id"))
            }
            guard
                let version = WireProtocol.negotiate(
                    clientMinimum: hello.minProtocolVersion,
                    clientMaximum: hello.maxProtocolVersion,
                    supported: configuration.supportedVersions
                )
            else {
                return fail(
                    WireProtocolError(
                        .unsupportedVersion,
                        "client speaks protocol versions \(hello.minProtocolVersion)...\(hello.maxProtocolVersion), "
                            + "this agent \(configuration.supportedVersions.lowerBound)...\(configuration.supportedVersions.upperBound); "
                            + "upgrade the older side",
                        requestID: frame.requestID
                    )
                )
            }
            state = .ready(protocolVersion: version)
            var welcome = WireWelcome()
            welcome.protocolVersion = version
            welcome.agentID = configuration.agentID
            welcome.agentSoftware = configuration.agentSoftware
            welcome.capabilities = configuration.capabilities
            welcome.maxFrameLength = configuration.maxFrameLength
            welcome.clientRole = client.role
            welcome.clientName = client.name
            welcome.agentMonotonicNs = agentClockNanoseconds
            return .completeHandshake(
                WireFrame(requestID: frame.requestID, .welcome(welcome)),
                protocolVersion: version,
                clientMaxFrameLength: WireProtocol.effectiveMaxFrameLength(announced: hello.maxFrameLength)
            )

        case .ready:
            guard let body = frame.envelope.body else {
                // The decoder never yields an empty envelope; handle it anyway rather than trap.
                return fail(WireProtocolError(.unknownMessage, "envelope holds no message", requestID: frame.requestID))
            }
            switch body {
            case .hello:
                return fail(
                    WireProtocolError(.unexpectedMessage, "second hello on a connection that is already ready", requestID: frame.requestID)
                )
            case .goodbye:
                state = .closing
                return .close
            case .error(let error):
                // A client reports a problem with something the agent sent. Fatal ones end the connection.
                if error.fatal {
                    state = .closing
                    return .close
                }
                return .none
            case .pong:
                // Replies to pings the agent sent; liveness only.
                return .none
            default:
                guard body.isClientRequest else {
                    return fail(
                        WireProtocolError(
                            .unexpectedMessage,
                            "\(body.messageName) is not a request an agent accepts",
                            requestID: frame.requestID
                        )
                    )
                }
                guard frame.requestID != 0 else {
                    return fail(
                        WireProtocolError(.invalidRequestID, "\(body.messageName) has request_id 0; requests need a non-zero id")
                    )
                }
                return .deliver(frame)
            }
        }
    }

    /// The decoder refused the byte stream.
    public mutating func decodingFailed(_ error: WireProtocolError) -> Action {
        switch state {
        case .closing, .closed: return .none
        case .awaitingHello, .ready: return fail(error)
        }
    }

    /// No hello arrived in time.
    public mutating func handshakeTimedOut(after seconds: Int) -> Action {
        guard state == .awaitingHello else { return .none }
        return fail(WireProtocolError(.handshakeTimeout, "no hello within \(seconds) s of connecting"))
    }

    /// The agent is stopping: say goodbye and close.
    public mutating func shutdownRequested(reason: String) -> Action {
        switch state {
        case .closing, .closed:
            return .none
        case .awaitingHello, .ready:
            state = .closing
            var goodbye = WireGoodbye()
            goodbye.reason = reason
            return .sendAndClose(WireFrame(requestID: 0, .goodbye(goodbye)), reason: nil)
        }
    }

    /// The connection is gone.
    public mutating func channelClosed() {
        state = .closed
    }

    private mutating func fail(_ error: WireProtocolError) -> Action {
        state = .closing
        // Every protocol violation ends the connection, whatever its code's range.
        var wire = error.wireMessage
        wire.fatal = true
        wire.agentID = configuration.agentID
        return .sendAndClose(WireFrame(requestID: error.requestID, .error(wire)), reason: error)
    }
}

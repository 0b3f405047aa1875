/// The client's side of one connection to an agent: hello → ready → closing → closed.
///
/// Pure, like `ServerConnectionStateMachine`: the handler feeds events and performs the returned actions.
public struct ClientConnectionStateMachine: Sendable {
    /// What the handler must do.
    public enum Action: Sendable {
        case none
        case send(WireFrame)
        /// Write this error frame, fail what is pending with the error, then close.
        case sendAndClose(WireFrame, WireProtocolError)
        /// The agent welcomed us.
        case handshakeSucceeded(WireWelcome)
        /// The agent refused the hello, or answered with something other than a welcome. Close.
        case handshakeFailed(WireProtocolError)
        /// A reply or stream message for the request with this frame's id.
        case deliver(WireFrame)
        /// The agent ended the connection (fatal error or goodbye): fail what is pending and close.
        case closeWithError(WireProtocolError)
    }

    enum State: Sendable, Equatable {
        case idle
        case awaitingWelcome(helloRequestID: UInt64)
        case ready(WireWelcome)
        case closing
        case closed
    }

    private(set) var state: State = .idle
    public let supportedVersions: ClosedRange<UInt32>

    public init(supportedVersions: ClosedRange<UInt32> = WireProtocol.supportedVersions) {
        self.supportedVersions = supportedVersions
    }

    /// The agent's welcome, once ready.
    public var welcome: WireWelcome? {
        if case .ready(let welcome) = state { return welcome }
        return nil
    }

    /// The connection is up: send the hello.
    public mutating func start(
        requestID: UInt64 = 1,
        software: String,
        capabilities: [String] = [],
        maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength
    ) -> Action {
        guard state == .idle else { return .none }
        var hello = WireHello()
        hello.minProtocolVersion = supportedVersions.lowerBound
        hello.maxProtocolVersion = supportedVersions.upperBound
        hello.clientSoftware = software
        hello.capabilities = capabilities
        hello.maxFrameLength = maxFrameLength
        state = .awaitingWelcome(helloRequestID: requestID)
        return .send(WireFrame(requestID: requestID, .hello(hello)))
    }

    public mutating func frameReceived(_ frame: WireFrame) -> Action {
        switch state {
        case .idle, .closing, .closed:
            return .none

        case .awaitingWelcome:
            switch frame.envelope.body {
            case .welcome(let welcome):
                guard supportedVersions.contains(welcome.protocolVersion) else {
                    state = .closing
                    return .handshakeFailed(
                        WireProtocolError(
                            .unsupportedVersion,
                            "agent chose protocol version \(welcome.protocolVersion), outside this client's \(supportedVersions)"
                        )
                    )
                }
                state = .ready(welcome)
                return .handshakeSucceeded(welcome)
            case .error(let error):
                state = .closing
                return .handshakeFailed(WireProtocolError(error.code, error.message, requestID: frame.requestID))
            default:
                state = .closing
                return .handshakeFailed(
                    WireProtocolError(.unexpectedMessage, "agent answered hello with \(frame.envelope.messageName)")
                )
            }

        case .ready:
            switch frame.envelope.body {
            case .ping(let ping):
                var pong = WirePong()
                pong.nonce = ping.nonce
                return .send(WireFrame(requestID: frame.requestID, .pong(pong)))
            case .goodbye(let goodbye):
                state = .closing
                return .closeWithError(WireProtocolError(.shuttingDown, "agent said goodbye: \(goodbye.reason)"))
            case .error(let error) where error.fatal || frame.requestID == 0:
                state = .closing
                return .closeWithError(WireProtocolError(error.code, error.message, requestID: frame.requestID))
            case .hello, .welcome:
                return protocolViolation(
                    WireProtocolError(.unexpectedMessage, "\(frame.envelope.messageName) after the handshake")
                )
            default:
                guard frame.requestID != 0 else {
                    return protocolViolation(
                        WireProtocolError(.invalidRequestID, "\(frame.envelope.messageName) with request_id 0")
                    )
                }
                return .deliver(frame)
            }
        }
    }

    /// The decoder refused the agent's byte stream.
    public mutating func decodingFailed(_ error: WireProtocolError) -> Action {
        switch state {
        case .closing, .closed: return .none
        default: return protocolViolation(error)
        }
    }

    /// The connection is gone.
    public mutating func channelClosed() {
        state = .closed
    }

    private mutating func protocolViolation(_ error: WireProtocolError) -> Action {
        state = .closing
        var wire = error.wireMessage
        wire.fatal = true
        return .sendAndClose(WireFrame(requestID: error.requestID, .error(wire)), error)
    }
}

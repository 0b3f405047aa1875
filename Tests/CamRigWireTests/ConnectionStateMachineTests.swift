import CamRigWire
import Testing

@Suite("Agent connection state machine", .timeLimit(.minutes(1)))
struct ServerConnectionStateMachineTests {
    func machine() -> ServerConnectionStateMachine {
        ServerConnectionStateMachine(
            configuration: .init(agentID: "agent-7", agentSoftware: "test", supportedVersions: 1...2),
            client: .init(role: .coordinator, name: "coordinator")
        )
    }

    func hello(min: UInt32 = 1, max: UInt32 = 1, id: UInt64 = 1) -> WireFrame {
        var hello = WireHello()
        hello.minProtocolVersion = min
        hello.maxProtocolVersion = max
        return WireFrame(requestID: id, .hello(hello))
    }

    func expectFatalError(_ action: ServerConnectionStateMachine.Action, _ code: WireErrorCode, sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .sendAndClose(let frame, _) = action, case .error(let error) = frame.envelope.body else {
            Issue.record("expected an error and a close, got \(action)", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, sourceLocation: sourceLocation)
        #expect(error.fatal, sourceLocation: sourceLocation)
        #expect(error.agentID == "agent-7", sourceLocation: sourceLocation)
    }

    @Test("hello is answered with a welcome at the highest common version, naming the client")
    func handshake() {
        var machine = machine()
        guard case .completeHandshake(let frame, let version, _) = machine.frameReceived(hello(min: 1, max: 9, id: 4), agentClockNanoseconds: 123) else {
            Issue.record("no welcome")
            return
        }
        #expect(version == 2)
        #expect(frame.requestID == 4)
        guard case .welcome(let welcome) = frame.envelope.body else {
            Issue.record("expected a welcome, got \(String(describing: frame.envelope.body))")
            return
        }
        #expect(welcome.protocolVersion == 2)
        #expect(welcome.agentID == "agent-7")
        #expect(welcome.clientRole == .coordinator)
        #expect(welcome.clientName == "coordinator")
        #expect(welcome.agentMonotonicNs == 123)
        #expect(machine.isReady)
    }

    @Test("a hello with request id 0: INVALID_REQUEST_ID and close")
    func helloWithoutRequestID() {
        var machine = machine()
        expectFatalError(machine.frameReceived(hello(id: 0), agentClockNanoseconds: 0), .invalidRequestID)
        #expect(!machine.isReady)
    }

    @Test("no common version: UNSUPPORTED_VERSION and close")
    func unsupportedVersion() {
        var machine = machine()
        expectFatalError(machine.frameReceived(hello(min: 3, max: 4), agentClockNanoseconds: 0), .unsupportedVersion)
        #expect(!machine.isReady)
        for (min, max) in [(UInt32(0), UInt32(0)), (2, 1)] {
            var other = self.machine()
            expectFatalError(other.frameReceived(hello(min: min, max: max), agentClockNanoseconds: 0), .unsupportedVersion)
        }
    }

    @Test("any message before hello: UNEXPECTED_MESSAGE and close")
    func messageBeforeHello() {
        var machine = machine()
        expectFatalError(machine.frameReceived(WireFrame(requestID: 1, .ping(WirePing())), agentClockNanoseconds: 0), .unexpectedMessage)
        // Nothing more happens once closing.
        guard case .none = machine.frameReceived(hello(), agentClockNanoseconds: 0) else {
            Issue.record("frames after a fatal error must be ignored")
            return
        }
    }

    @Test("a second hello: UNEXPECTED_MESSAGE and close")
    func secondHello() {
        var machine = machine()
        _ = machine.frameReceived(hello(), agentClockNanoseconds: 0)
        expectFatalError(machine.frameReceived(hello(id: 2), agentClockNanoseconds: 0), .unexpectedMessage)
    }

    @Test("requests are delivered once ready; request id 0 is refused")
    func requests() {
        var machine = machine()
        _ = machine.frameReceived(hello(), agentClockNanoseconds: 0)
        guard case .deliver(let frame) = machine.frameReceived(WireFrame(requestID: 5, .listDevices(.init())), agentClockNanoseconds: 0) else {
            Issue.record("request not delivered")
            return
        }
        #expect(frame.requestID == 5)
        expectFatalError(machine.frameReceived(WireFrame(requestID: 0, .ping(WirePing())), agentClockNanoseconds: 0), .invalidRequestID)
    }

    @Test("a reply-type message from a client is a protocol violation")
    func replyFromClient() {
        var machine = machine()
        _ = machine.frameReceived(hello(), agentClockNanoseconds: 0)
        expectFatalError(machine.frameReceived(WireFrame(requestID: 5, .deviceList(.init())), agentClockNanoseconds: 0), .unexpectedMessage)
    }

    @Test("decoder errors become fatal errors for the peer")
    func decodingFailure() {
        var machine = machine()
        expectFatalError(machine.decodingFailed(WireProtocolError(.frameTooLarge, "too big")), .frameTooLarge)
    }

    @Test("the handshake timeout fires only before hello")
    func handshakeTimeout() {
        var early = machine()
        expectFatalError(early.handshakeTimedOut(after: 10), .handshakeTimeout)
        var ready = machine()
        _ = ready.frameReceived(hello(), agentClockNanoseconds: 0)
        guard case .none = ready.handshakeTimedOut(after: 10) else {
            Issue.record("a ready connection must ignore the handshake timeout")
            return
        }
    }

    @Test("shutdown says goodbye once")
    func shutdown() {
        var machine = machine()
        _ = machine.frameReceived(hello(), agentClockNanoseconds: 0)
        guard case .sendAndClose(let frame, nil) = machine.shutdownRequested(reason: "stopping"), case .goodbye(let goodbye) = frame.envelope.body else {
            Issue.record("no goodbye")
            return
        }
        #expect(goodbye.reason == "stopping")
        guard case .none = machine.shutdownRequested(reason: "again") else {
            Issue.record("second shutdown must do nothing")
            return
        }
    }

    @Test("a client's goodbye closes without a reply")
    func clientGoodbye() {
        var machine = machine()
        _ = machine.frameReceived(hello(), agentClockNanoseconds: 0)
        guard case .close = machine.frameReceived(WireFrame(requestID: 0, .goodbye(.init())), agentClockNanoseconds: 0) else {
            Issue.record("goodbye must close")
            return
        }
    }
}

@Suite("Client connection state machine", .timeLimit(.minutes(1)))
struct ClientConnectionStateMachineTests {
    func welcome(version: UInt32 = 1) -> WireFrame {
        var welcome = WireWelcome()
        welcome.protocolVersion = version
        welcome.agentID = "agent-1"
        return WireFrame(requestID: 1, .welcome(welcome))
    }

    @Test("start sends a hello with this build's versions; a welcome makes it ready")
    func handshake() {
        var machine = ClientConnectionStateMachine()
        guard case .send(let frame) = machine.start(software: "test"), case .hello(let hello) = frame.envelope.body else {
            Issue.record("no hello")
            return
        }
        #expect(hello.minProtocolVersion == WireProtocol.supportedVersions.lowerBound)
        #expect(hello.maxProtocolVersion == WireProtocol.supportedVersions.upperBound)
        guard case .handshakeSucceeded(let welcome) = machine.frameReceived(welcome()) else {
            Issue.record("not ready")
            return
        }
        #expect(welcome.agentID == "agent-1")
    }

    @Test("an error instead of a welcome fails the handshake with the agent's code")
    func refused() {
        var machine = ClientConnectionStateMachine()
        _ = machine.start(software: "test")
        var error = WireError()
        error.code = .unsupportedVersion
        error.message = "no"
        guard case .handshakeFailed(let failure) = machine.frameReceived(WireFrame(requestID: 1, .error(error))) else {
            Issue.record("handshake should fail")
            return
        }
        #expect(failure.code == .unsupportedVersion)
    }

    @Test("a welcome with a version this client does not speak fails the handshake")
    func badVersion() {
        var machine = ClientConnectionStateMachine()
        _ = machine.start(software: "test")
        guard case .handshakeFailed(let failure) = machine.frameReceived(welcome(version: 99)) else {
            Issue.record("handshake should fail")
            return
        }
        #expect(failure.code == .unsupportedVersion)
    }

    @Test("replies are delivered by request id; pings are answered; goodbye and fatal errors close")
    func ready() {
        var machine = ClientConnectionStateMachine()
        _ = machine.start(software: "test")
        _ = machine.frameReceived(welcome())
        guard case .deliver(let reply) = machine.frameReceived(WireFrame(requestID: 8, .pong(.init()))) else {
            Issue.record("reply not delivered")
            return
        }
        #expect(reply.requestID == 8)
        var ping = WirePing()
        ping.nonce = 77
        guard case .send(let pong) = machine.frameReceived(WireFrame(requestID: 3, .ping(ping))), case .pong(let body) = pong.envelope.body else {
            Issue.record("ping not answered")
            return
        }
        #expect(body.nonce == 77)
        #expect(pong.requestID == 3)
        guard case .closeWithError(let error) = machine.frameReceived(WireFrame(requestID: 0, .goodbye(.init()))) else {
            Issue.record("goodbye must close")
            return
        }
        #expect(error.code == .shuttingDown)
    }

    @Test("a second welcome is a protocol violation")
    func secondWelcome() {
        var machine = ClientConnectionStateMachine()
        _ = machine.start(software: "test")
        _ = machine.frameReceived(welcome())
        guard case .sendAndClose(_, let error) = machine.frameReceived(welcome()) else {
            Issue.record("must close")
            return
        }
        #expect(error.code == .unexpectedMessage)
    }
}

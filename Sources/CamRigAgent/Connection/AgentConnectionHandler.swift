import CamRigClock
import CamRigDevices
import CamRigSecurity
import CamRigWire
import CamRigWireModel
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import NIOTLS

/// Tells a connection that the agent is shutting down.
struct AgentShutdownEvent: Sendable {
    var reason: String
}

/// Serves one client connection: runs `ServerConnectionStateMachine`, answers pings and clock probes on
/// the event loop, and passes other requests to the router.
///
/// Pipeline (client → agent): [NIOSSLServerHandler] → ByteToMessageHandler(WireFrameDecoder)
/// → WireFrameEncoder → AgentConnectionHandler.
final class AgentConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = WireFrame
    typealias OutboundOut = WireFrame

    private let configuration: ServerConnectionStateMachine.Configuration
    /// The host clock probes are answered from (t2, t3) and the welcome is stamped with.
    private let clock: HostClock
    private let handshakeTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private let verification: PeerVerificationRecord?
    private let insecureClient: ServerConnectionStateMachine.Client?
    private let router: AgentRequestRouter
    private var logger: Logger
    private var machine: ServerConnectionStateMachine?
    /// What the client announced it accepts, once the handshake has told (§3.1).
    private var clientMaxFrameLength = WireProtocol.minimumMaxFrameLength
    /// The rules for this client's requests, once it is known.
    private var core: AgentRequestCore?
    /// Finalizing, fetches and acknowledgements of this connection, in order.
    private let work = ConnectionWork()
    private var handshakeTimer: Scheduled<Void>?
    private var idleTimer: RepeatedTask?
    /// Whether a complete frame arrived since the last idle tick. Partial frames do not count, so a
    /// client trickling bytes of a frame it never finishes is closed like a silent one.
    private var frameSinceIdleTick = false
    private var tlsFailureLogged = false
    /// Identifies this connection's leases and its place in the connection budgets.
    private let connectionID: UInt64
    /// Asked once the client completed TLS and `Hello`: `nil` when it may stay, else why not.
    private let admission: @Sendable (_ id: UInt64, _ isCoordinator: Bool) -> String?
    /// Whether the connection was admitted as a client yet (at TLS completion, when its certificate
    /// says who it is; at `Hello` without TLS), and the refusal, if it was refused.
    private var admitted = false
    private var refusal: String?

    /// - Parameters:
    ///   - verification: for TLS connections, where the certificate check leaves the client's identity.
    ///   - insecureClient: for plaintext connections, the identity every client gets.
    init(
        connectionID: UInt64,
        admission: @escaping @Sendable (_ id: UInt64, _ isCoordinator: Bool) -> String? = { _, _ in nil },
        configuration: ServerConnectionStateMachine.Configuration,
        handshakeTimeout: TimeAmount,
        idleTimeout: TimeAmount,
        verification: PeerVerificationRecord?,
        insecureClient: ServerConnectionStateMachine.Client?,
        router: AgentRequestRouter,
        clock: HostClock = .system,
        logger: Logger
    ) {
        self.connectionID = connectionID
        self.admission = admission
        self.clock = clock
        self.configuration = configuration
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
        self.verification = verification
        self.insecureClient = insecureClient
        self.router = router
        self.logger = logger
        if let insecureClient {
            self.machine = ServerConnectionStateMachine(configuration: configuration, client: insecureClient)
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { startHandshakeTimer(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        startHandshakeTimer(context: context)
        context.fireChannelActive()
    }

    private func startHandshakeTimer(context: ChannelHandlerContext) {
        guard handshakeTimer == nil else { return }
        let seconds = Int(handshakeTimeout.nanoseconds / 1_000_000_000)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        handshakeTimer = context.eventLoop.scheduleTask(in: handshakeTimeout) {
            let (handler, context) = loopBound.value
            handler.handshakeTimedOut(context: context, seconds: seconds)
        }
        // Silence is detected between one and two idle timeouts after the last complete frame.
        idleTimer = context.eventLoop.scheduleRepeatedTask(initialDelay: idleTimeout, delay: idleTimeout) { _ in
            let (handler, context) = loopBound.value
            handler.idleTick(context: context)
        }
    }

    private func idleTick(context: ChannelHandlerContext) {
        defer { frameSinceIdleTick = false }
        guard !frameSinceIdleTick, machine?.isReady == true else { return }
        let seconds = idleTimeout.nanoseconds / 1_000_000_000
        logger.notice("closing idle connection: no complete message for \(seconds) s")
        shutdown(context: context, reason: "idle: no complete message within \(seconds) s")
    }

    private func handshakeTimedOut(context: ChannelHandlerContext, seconds: Int) {
        if var machine {
            let action = machine.handshakeTimedOut(after: seconds)
            self.machine = machine
            run(action, context: context)
        } else {
            // TLS never completed: nothing can be sent.
            logger.notice("closing connection: TLS handshake not completed within \(seconds) s")
            context.close(promise: nil)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            if let identity = verification?.acceptedIdentity {
                machine = ServerConnectionStateMachine(
                    configuration: configuration,
                    client: .init(role: identity.role.wire, name: identity.name)
                )
                logger[metadataKey: "client"] = "\(identity.name)"
                logger.debug("TLS established", metadata: ["role": "\(identity.role.rawValue)"])
                // Its certificate is verified: it leaves the unauthenticated budget now, out of a flood's
                // reach; a refusal is answered to its Hello.
                admit(isCoordinator: identity.role.wire == .coordinator)
                if let activity = try? context.pipeline.syncOperations.handler(type: HandshakeActivity.self) {
                    context.pipeline.syncOperations.removeHandler(activity, promise: nil)
                }
            } else {
                // The verifier accepted nothing, yet TLS completed: fail closed.
                logger.error("TLS completed without an accepted client certificate; closing")
                context.close(promise: nil)
            }
            return
        }
        if let shutdownEvent = event as? AgentShutdownEvent {
            shutdown(context: context, reason: shutdownEvent.reason)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func admit(isCoordinator: Bool) {
        guard !admitted else { return }
        admitted = true
        refusal = admission(connectionID, isCoordinator)
    }

    private func shutdown(context: ChannelHandlerContext, reason: String) {
        guard var machine else {
            context.close(promise: nil)
            return
        }
        let action = machine.shutdownRequested(reason: reason)
        self.machine = machine
        run(action, context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Taken first, as near the socket as this handler gets: t2 of a clock probe.
        let receivedAt = clock.now()
        let frame = unwrapInboundIn(data)
        frameSinceIdleTick = true
        guard var machine else {
            // Frames only arrive after TLS completed, which sets the machine; fail closed regardless.
            context.close(promise: nil)
            return
        }
        let action = machine.frameReceived(frame, agentClockNanoseconds: receivedAt)
        self.machine = machine
        run(action, context: context, receivedAt: receivedAt)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let protocolError = error as? WireProtocolError {
            logger.notice("protocol error from client: \(protocolError)")
            guard var machine else {
                context.close(promise: nil)
                return
            }
            let action = machine.decodingFailed(protocolError)
            self.machine = machine
            run(action, context: context)
            return
        }
        if error is ByteToMessageDecoderError {
            // Bytes after a decoding error; the connection is already closing.
            return
        }
        if error is NIOSSLError || error is BoringSSLError {
            if !tlsFailureLogged {
                tlsFailureLogged = true
                if let refusal = verification?.refusal {
                    logger.warning("refused client: \(refusal.message)", metadata: ["reason": "\(refusal.reason.rawValue)"])
                } else if machine == nil, MutualTLS.explain(error) == "closed the connection during the TLS handshake" {
                    logger.info("client closed the connection during the TLS handshake")
                } else if machine == nil {
                    logger.warning("refused client: \(MutualTLS.explain(error))")
                } else {
                    logger.info("TLS error: \(MutualTLS.explain(error))")
                }
            }
            context.close(promise: nil)
            return
        }
        logger.info("connection error: \(error)")
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        handshakeTimer?.cancel()
        idleTimer?.cancel()
        machine?.channelClosed()
        router.connectionClosed(connectionID)
        // Work already asked for is still done (a fetch's sends then fail, and its results stay spooled).
        work.finish()
        logger.debug("connection closed")
        context.fireChannelInactive()
    }

    private func run(_ action: ServerConnectionStateMachine.Action, context: ChannelHandlerContext, receivedAt: Int64 = 0) {
        switch action {
        case .none:
            break
        case .send(let frame):
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        case .sendAndClose(let frame, let reason):
            if let reason {
                logger.notice("closing connection: \(reason)")
            }
            handshakeTimer?.cancel()
            context.writeAndFlush(wrapOutboundOut(frame)).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        case .completeHandshake(let welcome, let version, let clientMaxFrameLength):
            handshakeTimer?.cancel()
            if !admitted { admit(isCoordinator: machine?.client.role == .coordinator) }
            if let refusal {
                logger.notice("refusing client: \(refusal)")
                let error = WireError(.resourceExhausted, agent: configuration.agentID, "\(refusal); try again later")
                context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: welcome.requestID, .error(error)))).assumeIsolated().whenComplete { _ in
                    context.close(promise: nil)
                }
                return
            }
            if let encoder = try? context.pipeline.syncOperations.handler(type: WireFrameEncoder.self) {
                encoder.peerMaxFrameLength = clientMaxFrameLength
            }
            self.clientMaxFrameLength = clientMaxFrameLength
            logger.info("client ready", metadata: ["protocol": "\(version)"])
            context.writeAndFlush(wrapOutboundOut(welcome), promise: nil)
        case .deliver(let frame):
            deliver(frame, context: context, receivedAt: receivedAt)
        case .close:
            context.close(promise: nil)
        }
    }

    /// Ping and clock probes answered right here on the event loop; the rest decided by the request core
    /// and carried out by the router.
    private func deliver(_ frame: WireFrame, context: ChannelHandlerContext, receivedAt: Int64) {
        if router.streams?.holds(requestID: frame.requestID, connection: connectionID) == true {
            // Its answer could not be told apart from the stream's frames.
            let error = WireProtocolError(
                .invalidRequestID,
                "request_id \(frame.requestID) (\(frame.envelope.messageName)) is still in use by an open stream of this connection; use a new id per request")
            run(.sendAndClose(error.frame, reason: error), context: context)
            return
        }
        switch frame.envelope.body {
        case .ping(let ping):
            var pong = WirePong()
            pong.nonce = ping.nonce
            context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: frame.requestID, .pong(pong))), promise: nil)
        case .clockProbe(let probe):
            var reply = WireClockProbeReply()
            reply.clientTransmitNs = probe.clientTransmitNs
            reply.agentReceiveNs = receivedAt
            reply.agentTransmitNs = clock.now()
            context.writeAndFlush(
                wrapOutboundOut(WireFrame(requestID: frame.requestID, .clockProbeReply(reply))),
                promise: nil
            )
        default:
            guard let client = machine?.client, let body = frame.envelope.body else { return }
            let core = self.core ?? AgentRequestCore(configuration: router.configuration, client: client)
            self.core = core
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            let connection = AgentRequestRouter.Connection(
                id: connectionID, eventLoop: eventLoop, work: work, maxFrameLength: clientMaxFrameLength
            ) { reply, promise in
                // Replies decided at once keep their order; others come back from the device queue or a stream.
                if eventLoop.inEventLoop {
                    let (handler, context) = loopBound.value
                    context.writeAndFlush(handler.wrapOutboundOut(reply), promise: promise)
                } else {
                    eventLoop.execute {
                        let (handler, context) = loopBound.value
                        context.writeAndFlush(handler.wrapOutboundOut(reply), promise: promise)
                    }
                }
            }
            // Every request, at trace level: what a client asks and how often (`--log-level trace`).
            logger.trace("request", metadata: ["message": "\(body.messageName)", "request_id": "\(frame.requestID)"])
            router.run(core.request(body), requestID: frame.requestID, client: client, connection: connection)
        }
    }
}

@available(*, unavailable)
extension AgentConnectionHandler: Sendable {}

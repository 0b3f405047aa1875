import CamRigSecurity
import CamRigWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL

/// The client end of one agent connection: drives `ClientConnectionStateMachine`, correlates replies
/// with requests by request id, and fails everything pending with a clear error when the connection ends.
final class AgentClientHandler: ChannelInboundHandler {
    typealias InboundIn = WireFrame
    typealias OutboundOut = WireFrame

    private var machine = ClientConnectionStateMachine()
    private let agent: String
    private let handshakePromise: EventLoopPromise<WireWelcome>
    private let verification: PeerVerificationRecord?
    private var pending: [UInt64: (promise: EventLoopPromise<AgentReply>, sentAt: Int64)] = [:]
    private var streams: [UInt64: AsyncThrowingStream<WireFrame, any Error>.Continuation] = [:]
    /// Streams opened by a START_STREAM trigger go on past `TriggerFired`, to `StreamEnded`.
    private var streamsPastTrigger: Set<UInt64> = []
    private var nextRequestID: UInt64 = 2  // 1 is the hello
    private var closeError: AgentClientError?
    private var context: ChannelHandlerContext?
    private let logger: Logger

    init(
        agent: String,
        handshakePromise: EventLoopPromise<WireWelcome>,
        verification: PeerVerificationRecord?,
        logger: Logger
    ) {
        self.agent = agent
        self.handshakePromise = handshakePromise
        self.verification = verification
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { start(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    private func start(context: ChannelHandlerContext) {
        // NIOSSL holds the hello until TLS completes.
        run(machine.start(requestID: 1, software: "camrig \(CamRigVersion.string)"), context: context)
    }

    /// Sends a request; the promise gets the first frame answering it. Call on the event loop.
    func send(_ body: WireEnvelope.OneOf_Body, payload: ByteBuffer? = nil, promise: EventLoopPromise<AgentReply>) {
        guard let context, machine.welcome != nil else {
            promise.fail(closeError ?? AgentClientError(.connectionClosed, agent: agent, "connection is not ready"))
            return
        }
        let requestID = nextRequestID
        nextRequestID &+= 1
        pending[requestID] = (promise, MonotonicClock.now())
        context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: requestID, body, payload: payload))).assumeIsolated()
            .whenFailure { [weak self] error in
                self?.pending.removeValue(forKey: requestID)?.promise.fail(
                    AgentClientError(.connectionClosed, agent: self?.agent ?? "?", "could not send \(body.messageName): \(error)")
                )
            }
    }

    /// Sends a request that opens a stream: every frame with its id goes to `continuation` until the
    /// stream's closing message (yielded too) or an error (thrown). Call on the event loop.
    func openStream(_ body: WireEnvelope.OneOf_Body, continuation: AsyncThrowingStream<WireFrame, any Error>.Continuation) {
        guard let context, machine.welcome != nil else {
            continuation.finish(throwing: closeError ?? AgentClientError(.connectionClosed, agent: agent, "connection is not ready"))
            return
        }
        let requestID = nextRequestID
        nextRequestID &+= 1
        streams[requestID] = continuation
        if case .scheduleTrigger(let trigger) = body, trigger.action == .startStream { streamsPastTrigger.insert(requestID) }
        context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: requestID, body)), promise: nil)
    }

    /// Forgets a request whose caller gave up (timeout), so a late reply is ignored. Returns whether it
    /// was still waiting.
    func abandon(_ promise: EventLoopPromise<AgentReply>) -> Bool {
        guard let entry = pending.first(where: { $0.value.promise.futureResult === promise.futureResult }) else { return false }
        pending.removeValue(forKey: entry.key)
        return true
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Keep-alive: agents close connections that stay silent past their idle timeout.
        if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .write, machine.welcome != nil {
            let requestID = nextRequestID
            nextRequestID &+= 1
            context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: requestID, .ping(WirePing()))), promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Taken first: the reply's arrival as near the socket as this handler gets.
        let receivedAt = MonotonicClock.now()
        run(machine.frameReceived(unwrapInboundIn(data)), context: context, receivedAt: receivedAt)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let protocolError = error as? WireProtocolError {
            run(machine.decodingFailed(protocolError), context: context)
            return
        }
        if error is ByteToMessageDecoderError { return }
        let failure: AgentClientError
        if error is NIOSSLError || error is BoringSSLError {
            if let refusal = verification?.refusal {
                failure = AgentClientError(.tlsFailed, agent: agent, "refused the agent's certificate: \(refusal.message)")
            } else {
                failure = AgentClientError(.tlsFailed, agent: agent, "TLS failed: \(MutualTLS.explain(error))")
            }
        } else {
            failure = AgentClientError(.connectionClosed, agent: agent, "connection error: \(error)")
        }
        closeError = closeError ?? failure
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        machine.channelClosed()
        let error = closeError ?? AgentClientError(.connectionClosed, agent: agent, "connection closed by the agent")
        handshakePromise.fail(error)
        let waiting = pending
        pending.removeAll()
        for entry in waiting.values { entry.promise.fail(error) }
        let open = streams
        streams.removeAll()
        for continuation in open.values { continuation.finish(throwing: error) }
        context.fireChannelInactive()
    }

    private func run(_ action: ClientConnectionStateMachine.Action, context: ChannelHandlerContext, receivedAt: Int64 = 0) {
        switch action {
        case .none:
            break
        case .send(let frame):
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        case .sendAndClose(let frame, let error):
            closeError = AgentClientError(.protocolViolation, agent: agent, error.message, code: error.code)
            logger.warning("agent broke the protocol; closing", metadata: ["agent": "\(agent)", "error": "\(error)"])
            context.writeAndFlush(wrapOutboundOut(frame)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        case .handshakeSucceeded(let welcome):
            if let encoder = try? context.pipeline.syncOperations.handler(type: WireFrameEncoder.self) {
                encoder.peerMaxFrameLength = WireProtocol.effectiveMaxFrameLength(announced: welcome.maxFrameLength)
            }
            handshakePromise.succeed(welcome)
        case .handshakeFailed(let error):
            closeError = AgentClientError(.handshakeFailed, agent: agent, "refused the hello: \(error.message)", code: error.code)
            context.close(promise: nil)
        case .deliver(let frame):
            if let continuation = streams[frame.requestID] {
                switch frame.envelope.body {
                case .error(let error):
                    streams.removeValue(forKey: frame.requestID)
                    continuation.finish(throwing: AgentClientError(.remoteError, agent: agent, error.message, code: error.code))
                case .triggerFired where streamsPastTrigger.contains(frame.requestID):
                    continuation.yield(frame)
                case .streamEnded, .resultsEnd, .triggerFired:
                    streams.removeValue(forKey: frame.requestID)
                    streamsPastTrigger.remove(frame.requestID)
                    continuation.yield(frame)
                    continuation.finish()
                default:
                    continuation.yield(frame)
                }
            } else if let entry = pending.removeValue(forKey: frame.requestID) {
                entry.promise.succeed(AgentReply(frame: frame, sentAt: entry.sentAt, receivedAt: receivedAt))
            } else {
                logger.debug("reply for a request nobody waits for", metadata: ["request": "\(frame.requestID)"])
            }
        case .closeWithError(let error):
            closeError = AgentClientError(
                error.code == .shuttingDown ? .connectionClosed : .remoteError,
                agent: agent,
                error.message,
                code: error.code
            )
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension AgentClientHandler: Sendable {}

import CamRigClock
import CamRigSecurity
import CamRigWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL

/// The client end of one agent connection: drives `ClientConnectionStateMachine`, correlates replies
/// with requests by request id, and fails everything pending with a clear error when the connection ends.
///
/// It is also the one place that decides whether the connection reads, which is how streams stay
/// bounded (see `AgentStream`):
///
/// - While any stream's consumer has its buffer full, the handler holds back the channel's `read()`
///   calls: the socket is not read, TCP's window closes, and the agent drops frames with a count.
///   Reading resumes when the consumer catches up.
/// - One connection carries every request, so a stream that stays full would stall the others (and
///   the replies its own consumer may be waiting for). After `readStallLimit` the full streams start
///   shedding: their video frames are dropped here, counted into the next delivered frame's
///   `dropped_before` and into `StreamEnded.frames_dropped` exactly as if the agent had dropped them,
///   and the connection reads again. A stream stops shedding once its consumer catches up. Other
///   messages (replies, trigger and stream notices, results, events) are never dropped.
final class AgentClientHandler: ChannelDuplexHandler {
    typealias InboundIn = WireFrame
    typealias OutboundIn = WireFrame
    typealias OutboundOut = WireFrame

    /// How long a full stream may keep the connection from reading before it sheds frames instead.
    static let defaultReadStallLimit: TimeAmount = .seconds(1)

    /// A stream waiting for its messages.
    private struct OpenStream {
        var source: AgentStream.Source
        var token: AgentStream.Token
        /// Opened by a START_STREAM trigger: goes on past `TriggerFired`, to `StreamEnded`.
        var pastTrigger: Bool
        /// Its consumer stayed behind past the stall limit: video frames are dropped here.
        var shedding = false
        /// Video frames dropped here since the last one delivered: added to the next one's `dropped_before`.
        var shedSinceDelivered: UInt64 = 0
        /// Every video frame dropped here: added to `StreamEnded.frames_dropped`.
        var shedTotal: UInt64 = 0
    }

    private var machine = ClientConnectionStateMachine()
    private let agent: String
    private let handshakePromise: EventLoopPromise<WireWelcome>
    private let verification: PeerVerificationRecord?
    private var pending: [UInt64: (promise: EventLoopPromise<AgentReply>, sentAt: Int64)] = [:]
    private var streams: [UInt64: OpenStream] = [:]
    /// Streams whose buffer filled and whose consumer has not caught up since; the socket is read only
    /// while this is empty.
    private var fullStreams: Set<UInt64> = []
    /// A `read()` came down the pipeline while a stream was full; issued once none is.
    private var readHeld = false
    private let readStallLimit: TimeAmount
    /// Fires `readStallLimit` after reading stopped, unless it resumed first.
    private var stallTimer: Scheduled<Void>?
    private var nextRequestID: UInt64 = 2  // 1 is the hello
    private var closeError: AgentClientError?
    private var context: ChannelHandlerContext?
    private let logger: Logger
    /// The largest frame this client accepts, announced in its hello.
    private let maxFrameLength: UInt32

    init(
        agent: String,
        handshakePromise: EventLoopPromise<WireWelcome>,
        verification: PeerVerificationRecord?,
        maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength,
        readStallLimit: TimeAmount = AgentClientHandler.defaultReadStallLimit,
        logger: Logger
    ) {
        self.maxFrameLength = maxFrameLength
        self.agent = agent
        self.handshakePromise = handshakePromise
        self.verification = verification
        self.readStallLimit = readStallLimit
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
        run(machine.start(requestID: 1, software: "camrig \(CamRigVersion.string)", maxFrameLength: maxFrameLength), context: context)
    }

    /// Sends a request; the promise gets the first frame answering it. Call on the event loop.
    func send(_ body: WireEnvelope.OneOf_Body, payload: ByteBuffer? = nil, promise: EventLoopPromise<AgentReply>) {
        guard let context, machine.welcome != nil else {
            promise.fail(closeError ?? AgentClientError(.connectionClosed, agent: agent, "connection is not ready"))
            return
        }
        let requestID = nextRequestID
        nextRequestID &+= 1
        pending[requestID] = (promise, HostClock.monotonicNow())
        context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: requestID, body, payload: payload))).assumeIsolated()
            .whenFailure { [weak self] error in
                self?.pending.removeValue(forKey: requestID)?.promise.fail(
                    AgentClientError(
                        .connectionClosed, agent: self?.agent ?? "?", "could not send \(body.messageName): \(error)")
                )
            }
    }

    /// Sends a request that opens a stream: every frame with its id is yielded to `source` until the
    /// stream's closing message (yielded too) or an error (thrown). Call on the event loop.
    func openStream(_ body: WireEnvelope.OneOf_Body, source: AgentStream.Source, token: AgentStream.Token) {
        guard let context, machine.welcome != nil else {
            source.finish(closeError ?? AgentClientError(.connectionClosed, agent: agent, "connection is not ready"))
            return
        }
        let requestID = nextRequestID
        nextRequestID &+= 1
        let pastTrigger: Bool
        if case .scheduleTrigger(let trigger) = body, trigger.action == .startStream {
            pastTrigger = true
        } else {
            pastTrigger = false
        }
        streams[requestID] = OpenStream(source: source, token: token, pastTrigger: pastTrigger)
        context.writeAndFlush(wrapOutboundOut(WireFrame(requestID: requestID, body)), promise: nil)
    }

    /// The consumer of a full stream has taken it down to its low watermark. Call on the event loop.
    func consumerCaughtUp(_ token: AgentStream.Token) {
        guard let requestID = streams.first(where: { $0.value.token === token })?.key else { return }
        streams[requestID]?.shedding = false
        fullStreams.remove(requestID)
        resumeReadingIfNoStreamIsFull()
    }

    /// The consumer of a stream is gone (finished, dropped its iterator, or was cancelled): forget the
    /// stream, so that its later messages are dropped instead of buffered. Call on the event loop.
    func consumerStopped(_ token: AgentStream.Token) {
        guard let requestID = streams.first(where: { $0.value.token === token })?.key else { return }
        closeStream(requestID)?.finish()
    }

    /// Forgets a stream; returns its source for the caller to finish.
    private func closeStream(_ requestID: UInt64) -> AgentStream.Source? {
        let stream = streams.removeValue(forKey: requestID)
        if fullStreams.remove(requestID) != nil { resumeReadingIfNoStreamIsFull() }
        return stream?.source
    }

    /// Hands a stream its next message: sheds or annotates video frames, yields, and notes whether the
    /// stream is now full.
    private func deliver(_ frame: WireFrame, to requestID: UInt64) {
        guard var stream = streams[requestID] else { return }
        var frame = frame
        switch frame.envelope.body {
        case .videoFrame(var video):
            if stream.shedding {
                stream.shedSinceDelivered += 1
                stream.shedTotal += 1
                streams[requestID] = stream
                return
            }
            if stream.shedSinceDelivered > 0 {
                video.droppedBefore += stream.shedSinceDelivered
                frame.envelope.body = .videoFrame(video)
                stream.shedSinceDelivered = 0
                streams[requestID] = stream
            }
        case .streamEnded(var ended) where stream.shedTotal > 0:
            ended.framesDropped += stream.shedTotal
            frame.envelope.body = .streamEnded(ended)
        default:
            break
        }
        switch stream.source.yield(frame) {
        case .produceMore:
            break
        case .stopProducing:
            stopReading(for: requestID)
        case .dropped:
            // The consumer is gone and its termination is on its way here; forget the stream now.
            closeStream(requestID)?.finish()
        }
    }

    private func stopReading(for requestID: UInt64) {
        guard streams[requestID]?.shedding == false else { return }
        fullStreams.insert(requestID)
        guard stallTimer == nil, let context else { return }
        stallTimer = context.eventLoop.assumeIsolated().scheduleTask(in: readStallLimit) { [self] in
            stallTimer = nil
            shedFullStreams()
        }
    }

    /// The full streams kept the connection from reading for the stall limit: they shed frames from
    /// now on, and the connection reads again.
    private func shedFullStreams() {
        guard !fullStreams.isEmpty else { return }
        for requestID in fullStreams { streams[requestID]?.shedding = true }
        logger.debug(
            "stream consumers behind; dropping their video frames with a count",
            metadata: ["agent": "\(agent)", "streams": "\(fullStreams.sorted())"]
        )
        fullStreams.removeAll()
        resumeReadingIfNoStreamIsFull()
    }

    private func resumeReadingIfNoStreamIsFull() {
        guard fullStreams.isEmpty else { return }
        stallTimer?.cancel()
        stallTimer = nil
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    func read(context: ChannelHandlerContext) {
        if fullStreams.isEmpty {
            context.read()
        } else {
            readHeld = true
        }
    }

    /// Forgets a request whose caller gave up (timeout), so a late reply is ignored. Returns whether it
    /// was still waiting.
    func abandon(_ promise: EventLoopPromise<AgentReply>) -> Bool {
        guard let entry = pending.first(where: { $0.value.promise.futureResult === promise.futureResult }) else {
            return false
        }
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
        let receivedAt = HostClock.monotonicNow()
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
                failure = AgentClientError(
                    .tlsFailed, agent: agent, "refused the agent's certificate: \(refusal.message)")
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
        fullStreams.removeAll()
        stallTimer?.cancel()
        stallTimer = nil
        for stream in open.values { stream.source.finish(error) }
        context.fireChannelInactive()
    }

    private func run(
        _ action: ClientConnectionStateMachine.Action, context: ChannelHandlerContext, receivedAt: Int64 = 0
    ) {
        switch action {
        case .none:
            break
        case .send(let frame):
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        case .sendAndClose(let frame, let error):
            closeError = AgentClientError(.protocolViolation, agent: agent, error.message, code: error.code)
            logger.warning("agent broke the protocol; closing", metadata: ["agent": "\(agent)", "error": "\(error)"])
            context.writeAndFlush(wrapOutboundOut(frame)).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        case .handshakeSucceeded(let welcome):
            if let encoder = try? context.pipeline.syncOperations.handler(type: WireFrameEncoder.self) {
                encoder.peerMaxFrameLength = WireProtocol.effectiveMaxFrameLength(announced: welcome.maxFrameLength)
            }
            handshakePromise.succeed(welcome)
        case .handshakeFailed(let error):
            closeError = AgentClientError(
                .handshakeFailed, agent: agent, "refused the hello: \(error.message)", code: error.code)
            context.close(promise: nil)
        case .deliver(let frame):
            if let stream = streams[frame.requestID] {
                switch frame.envelope.body {
                case .error(let error):
                    closeStream(frame.requestID)?.finish(
                        AgentClientError(.remoteError, agent: agent, error.message, code: error.code))
                case .triggerFired where stream.pastTrigger:
                    deliver(frame, to: frame.requestID)
                case .streamEnded, .resultsEnd, .triggerFired, .recordingEnded:
                    deliver(frame, to: frame.requestID)
                    closeStream(frame.requestID)?.finish()
                case .fileChunk(let chunk) where chunk.last:
                    deliver(frame, to: frame.requestID)
                    closeStream(frame.requestID)?.finish()
                default:
                    deliver(frame, to: frame.requestID)
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

#if canImport(Glibc)
import Glibc
#endif
import CamRigClock
import CamRigSecurity
import CamRigWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A connection to one agent, ready to use: TLS and the protocol handshake are done when `connect`
/// returns.
///
/// Requests may be sent from any task; each waits for its own reply, matched by request id.
public final class AgentClient: Sendable {
    /// Where the agent is.
    public let endpoint: AgentEndpoint
    /// What the agent said about itself and about us.
    public let welcome: WireWelcome
    /// The agent's certificate identity, for TLS connections.
    public let agentIdentity: PeerIdentity?
    private let channel: any Channel
    private let handler: NIOLoopBound<AgentClientHandler>
    /// The chain the agent presented and its verdict, judged again after the revocation list changes.
    private let verification: PeerVerificationRecord?

    private init(
        endpoint: AgentEndpoint,
        welcome: WireWelcome,
        verification: PeerVerificationRecord?,
        channel: any Channel,
        handler: NIOLoopBound<AgentClientHandler>
    ) {
        self.endpoint = endpoint
        self.welcome = welcome
        self.agentIdentity = verification?.acceptedIdentity
        self.verification = verification
        self.channel = channel
        self.handler = handler
    }

    /// Judges the agent's certificate again with `verifier` (the CA's revocation list, read again since
    /// this connection was made): when it is now refused, the connection is closed and the refusal
    /// returned.
    public func recheck(with verifier: PeerCertificateVerifier) async -> PeerRefusal? {
        guard let verification, !verification.chain.isEmpty else { return nil }
        guard case .refused(let refusal) = await verifier.verify(chain: verification.chain) else { return nil }
        verification.outcome = .refused(refusal)
        try? await channel.close()
        return refusal
    }

    /// The connection's event loop as a task executor: a task that makes requests one after another
    /// runs `withTaskExecutorPreference(client.executor) { … }` to make them without a thread switch
    /// (see `EventLoopTaskExecutor`).
    public var executor: EventLoopTaskExecutor { EventLoopTaskExecutor(channel.eventLoop) }

    /// Connects, completes TLS (when `security` is `.tls`) and the hello/welcome handshake.
    ///
    /// - Parameter timeout: for the TCP connect and, again, for TLS plus handshake.
    public static func connect(
        to endpoint: AgentEndpoint,
        security: ClientSecurity,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        timeout: TimeAmount = .seconds(5),
        keepAliveInterval: TimeAmount = .seconds(30),
        maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength,
        logger: Logger = Logger(label: "camrig.client")
    ) async throws -> AgentClient {
        let name = endpoint.description
        let verification: PeerVerificationRecord? = if case .tls = security { PeerVerificationRecord() } else { nil }
        let eventLoop = group.next()
        let handshake = eventLoop.makePromise(of: WireWelcome.self)
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    let handlers = channel.pipeline.syncOperations
                    if case .tls(let tls) = security {
                        try handlers.addHandler(try tls.makeClientHandler(recordingInto: verification!))
                    }
                    try handlers.addHandler(IdleStateHandler(writeTimeout: keepAliveInterval))
                    try handlers.addHandler(ByteToMessageHandler(WireFrameDecoder(maxFrameLength: maxFrameLength)))
                    try handlers.addHandler(WireFrameEncoder())
                    try handlers.addHandler(
                        AgentClientHandler(
                            agent: name,
                            handshakePromise: handshake,
                            verification: verification,
                            maxFrameLength: maxFrameLength,
                            logger: logger
                        )
                    )
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: endpoint.host, port: endpoint.port).get()
        } catch {
            let failure = AgentClientError(
                .connectFailed,
                agent: name,
                "cannot connect (\(error)); is camrig-agent running there and listening on port \(endpoint.port)?"
            )
            handshake.fail(failure)
            throw failure
        }
        let timer = channel.eventLoop.scheduleTask(in: timeout) {
            handshake.fail(
                AgentClientError(
                    .timeout,
                    agent: name,
                    "no welcome within \(timeout.nanoseconds / 1_000_000) ms; is this a camrig-agent, and does it use TLS like this client?"
                )
            )
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        let welcome = try await handshake.futureResult.get()
        let handler = try await channel.eventLoop.submit {
            NIOLoopBound(
                try channel.pipeline.syncOperations.handler(type: AgentClientHandler.self), eventLoop: channel.eventLoop
            )
        }.get()
        return AgentClient(
            endpoint: endpoint,
            welcome: welcome,
            verification: verification,
            channel: channel,
            handler: handler
        )
    }

    /// Sends a request and returns the agent's reply with its send and receive times. An `Error` reply is
    /// thrown as `.remoteError`.
    public func request(
        _ body: WireEnvelope.OneOf_Body,
        payload: ByteBuffer? = nil,
        timeout: TimeAmount = .seconds(10)
    ) async throws -> AgentReply {
        let promise = channel.eventLoop.makePromise(of: AgentReply.self)
        let handler = self.handler
        let agent = endpoint.description
        if channel.eventLoop.inEventLoop {
            // Running on the connection's thread (see `executor`): written right here.
            handler.value.send(body, payload: payload, promise: promise)
        } else {
            channel.eventLoop.execute {
                handler.value.send(body, payload: payload, promise: promise)
            }
        }
        let timer = channel.eventLoop.scheduleTask(in: timeout) {
            if handler.value.abandon(promise) {
                promise.fail(
                    AgentClientError(
                        .timeout, agent: agent,
                        "no reply to \(body.messageName) within \(timeout.nanoseconds / 1_000_000) ms")
                )
            }
        }
        defer { timer.cancel() }
        let reply = try await promise.futureResult.get()
        if case .error(let error) = reply.frame.envelope.body {
            throw AgentClientError(.remoteError, agent: agent, error.message, code: error.code)
        }
        return reply
    }

    /// Sends a request that opens a stream (`StartStream`, a START_STREAM trigger, `FetchResults`,
    /// `Subscribe`) and returns every message answering it: the reply first, then the stream's messages,
    /// ending with its closing message. An `Error` from the agent is thrown.
    ///
    /// The stream holds at most `buffering.highWatermark` messages; a consumer that falls behind makes
    /// the connection stop reading, and the agent drops frames with a count instead (see `AgentStream`).
    public func stream(_ body: WireEnvelope.OneOf_Body, buffering: AgentStream.Buffering = .default) -> AgentStream {
        Self.openStream(body, buffering: buffering, handler: handler)
    }

    /// Opens a stream on the connection whose handler this is.
    static func openStream(
        _ body: WireEnvelope.OneOf_Body,
        buffering: AgentStream.Buffering,
        handler: NIOLoopBound<AgentClientHandler>
    ) -> AgentStream {
        let (stream, source, token) = AgentStream.make(buffering: buffering, handler: handler)
        handler.eventLoop.execute {
            handler.value.openStream(body, source: source, token: token)
        }
        return stream
    }

    /// When a batch of requests went out (see `openStreams`).
    public struct BatchWritten: Sendable {
        /// When the last request was handed to its socket (`HostClock`).
        public var at: Int64
        /// CPU time the event loops spent writing them, summed: the coordinator's own cost, apart from
        /// any wait for a core.
        public var cpuNanoseconds: Int64
    }

    /// Opens one stream on each of many connections at once: one task per event loop (not one per
    /// connection) writes the requests of every connection it serves, back to back. This is how a
    /// trigger reaches a thousand agents within milliseconds: no task switch or hop between two of them.
    ///
    /// Returns the streams in the order of `requests`, and a future saying when the last request was
    /// handed to its socket and what writing them cost.
    public static func openStreams(
        _ requests: [(client: AgentClient, body: WireEnvelope.OneOf_Body)],
        buffering: AgentStream.Buffering = .default
    ) -> (streams: [AgentStream], written: EventLoopFuture<BatchWritten>?) {
        var streams: [AgentStream] = []
        streams.reserveCapacity(requests.count)
        var batches: [ObjectIdentifier: (loop: any EventLoop, opens: [@Sendable () -> Void])] = [:]
        for (client, body) in requests {
            let handler = client.handler
            let (stream, source, token) = AgentStream.make(buffering: buffering, handler: handler)
            streams.append(stream)
            let loop = handler.eventLoop
            batches[ObjectIdentifier(loop), default: (loop, [])].opens.append {
                handler.value.openStream(body, source: source, token: token)
            }
        }
        let written = batches.values.map { batch in
            batch.loop.submit {
                let cpuBefore = Self.threadCPUTime()
                for open in batch.opens { open() }
                return BatchWritten(at: HostClock.monotonicNow(), cpuNanoseconds: Self.threadCPUTime() - cpuBefore)
            }
        }
        guard let first = written.first else { return (streams, nil) }
        let all = EventLoopFuture.whenAllSucceed(written, on: first.eventLoop).map { batches in
            BatchWritten(at: batches.map(\.at).max() ?? 0, cpuNanoseconds: batches.map(\.cpuNanoseconds).reduce(0, +))
        }
        return (streams, all)
    }

    /// CPU time used by the calling thread, in nanoseconds.
    private static func threadCPUTime() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// Tells the agent these results are stored here: it deletes them from its spool. Ids it no longer
    /// holds are answered `NOT_FOUND` (the others deleted all the same).
    public func acknowledge(_ resultIDs: [String]) async throws {
        var acknowledge = WireAcknowledgeResults()
        acknowledge.resultIds = resultIDs
        _ = try await request(.acknowledgeResults(acknowledge))
    }

    /// One ping; returns the round trip, from writing the ping to reading the pong on the event loop.
    public func ping(timeout: TimeAmount = .seconds(5)) async throws -> Duration {
        var ping = WirePing()
        ping.nonce = UInt64.random(in: 1...UInt64.max)
        let reply = try await request(.ping(ping), timeout: timeout)
        guard case .pong(let pong) = reply.frame.envelope.body, pong.nonce == ping.nonce else {
            throw AgentClientError(
                .protocolViolation, agent: endpoint.description,
                "answered ping with \(reply.frame.envelope.messageName)")
        }
        return reply.roundTrip
    }

    /// Says goodbye and closes the connection.
    public func close() async {
        var goodbye = WireGoodbye()
        goodbye.reason = "client done"
        try? await channel.writeAndFlush(WireFrame(requestID: 0, .goodbye(goodbye)))
        try? await channel.close()
    }

    /// The agent's address as connected.
    public var remoteAddress: SocketAddress? { channel.remoteAddress }

    /// Completes when the connection closes.
    public var closed: Void {
        get async { try? await channel.closeFuture.get() }
    }
}

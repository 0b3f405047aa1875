import CamRigClock
import CamRigSecurity
import CamRigWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// The agent: accepts client connections and serves the wire protocol on each, with the services that
/// own its state.
///
/// Runs as a swift-service-lifecycle `Service` made of a `ServiceGroup`: the device service (devices,
/// leases, hot-plug) and the listener. On graceful shutdown (SIGTERM/SIGINT) the listener goes first: it
/// stops accepting, tells every connected client goodbye, ends streams, waits for fired captures to
/// be stored and stops the trigger scheduler; then the device service stops.
public final class AgentServer: Service, Sendable {
    public let configuration: AgentConfiguration
    private let group: any EventLoopGroup
    private let logger: Logger
    private let connections: ConnectionRegistry
    private let addressPromise: EventLoopPromise<SocketAddress>
    private let router: AgentRequestRouter
    private let clockChannel: ClockChannelServer
    /// The one thread that reads, deletes and flushes spool files, off the event loops.
    private let spoolThread: NIOThreadPool

    public init(configuration: AgentConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger) {
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.addressPromise = group.any().makePromise(of: SocketAddress.self)
        self.connections = ConnectionRegistry(limits: configuration.connectionLimits, logger: logger)
        let streams = configuration.devices.map { AgentStreams(devices: $0, logger: logger) }
        let phaseLocks = streams.map { AgentPhaseLocks(streams: $0, logger: logger) }
        if let phaseLocks {
            // A phase lock lives under its device's lease: when the lease ends, so does the lock (unless the
            // agent records the camera: then it holds until the recording ends, `AgentPhaseLocks.unlock`).
            // A vanished device's lock stays listed as cannot-lock, saying why, until it is locked again.
            configuration.devices?.onLeaseEnded { [weak phaseLocks] deviceID, vanished in
                if vanished { phaseLocks?.deviceVanished(deviceID: deviceID) } else { phaseLocks?.unlock(deviceID: deviceID) }
            }
        }
        // The spool's one thread: photos are stored, paged out and deleted there, off the event loops
        // and Swift's cooperative threads.
        let spoolThread = NIOThreadPool(numberOfThreads: 1)
        self.spoolThread = spoolThread
        let capture: AgentCapture? =
            if let streams, let phaseLocks, let spool = configuration.spool {
                AgentCapture(
                    streams: streams, phaseLocks: phaseLocks, spool: spool, spoolThread: spoolThread,
                    agentID: configuration.agentID, realtime: configuration.realtimeTriggers, logger: logger)
            } else {
                nil
            }
        var recordings: AgentRecordings?
        if let streams, let spool = configuration.spool {
            let directory = spool.directory.appendingPathComponent("recordings")
            do {
                recordings = try AgentRecordings(
                    directory: directory, capacityBytes: configuration.recordingSpaceBytes, agentID: configuration.agentID,
                    streams: streams, threadPool: spoolThread, eventLoop: group.any(), logger: logger)
            } catch {
                logger.error("on-host recording is off: its folder cannot be made", metadata: ["folder": "\(directory.path)", "error": "\(error)"])
            }
        }
        clockChannel = ClockChannelServer(clock: configuration.clock, logger: logger)
        router = AgentRequestRouter(
            agentID: configuration.agentID,
            devices: configuration.devices,
            streams: streams,
            capture: capture,
            results: configuration.spool.map { [spoolThread] in ResultService(spool: $0, agentID: configuration.agentID, threadPool: spoolThread) },
            clockChannel: clockChannel,
            phaseLocks: phaseLocks,
            recordings: recordings
        )
    }

    /// The address the server listens on, once bound (useful with port 0).
    public var localAddress: SocketAddress {
        get async throws { try await addressPromise.futureResult.get() }
    }

    /// Number of open client connections.
    public var connectionCount: Int { connections.count }

    /// What `reloadTLS()` did.
    public struct TLSReload: Sendable {
        public var reloaded: MutualTLS.Reloaded
        /// Connections closed because their peer's certificate is now refused.
        public var closed: [PeerRefusal]
    }

    /// Re-reads the TLS directory (the agent's certificate and key, the CA, `crl.pem`) for new
    /// connections, and closes the open connections whose certificates are now refused; the others carry
    /// on undisturbed. On an error the previous certificates stay in use. What SIGHUP does.
    @discardableResult
    public func reloadTLS() async throws -> TLSReload {
        guard case .tls(let tls) = configuration.security else {
            throw AgentServerError("this agent runs without TLS (--insecure): there is nothing to reload")
        }
        let reloaded: MutualTLS.Reloaded
        do {
            reloaded = try tls.reload()
        } catch {
            logger.error("TLS reload failed, still using the certificates loaded before: \(error)")
            throw error
        }
        let closed = await connections.recheck(with: tls.verifier)
        logger.notice(
            "reloaded TLS directory",
            metadata: [
                "certificate_until": "\(reloaded.certificate.notValidAfter)",
                "renewed": "\(reloaded.renewed)",
                "revoked": "\(reloaded.revokedCount)",
                "crl_number": "\(reloaded.revocationListNumber)",
                "connections_closed": "\(closed.count)",
            ]
        )
        return TLSReload(reloaded: reloaded, closed: closed)
    }

    public func run() async throws {
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if let devices = configuration.devices {
            services.append(.init(service: devices))
            services.append(.init(service: StatePublisher(events: devices.events, spool: configuration.spool, phaseLocks: router.phaseLocks)))
        }
        // After the devices and before the listener: shut down after the listener has closed the recordings.
        if let recordings = router.recordings { services.append(.init(service: RecordingsService(recordings: recordings))) }
        services.append(.init(service: Listener(server: self)))
        try await ServiceGroup(configuration: .init(services: services, logger: logger)).run()
    }

    /// The recordings' owner, handling their events for as long as the agent runs.
    private struct RecordingsService: Service {
        let recordings: AgentRecordings
        func run() async throws {
            await withGracefulShutdownHandler {
                await recordings.run()
            } onGracefulShutdown: {
                recordings.finish()
            }
        }
    }

    /// The listener and its connections, as a service of the agent's group.
    private struct Listener: Service {
        let server: AgentServer
        func run() async throws { try await server.serve() }
    }

    private func serve() async throws {
        let channel: any Channel
        do {
            channel = try await makeBootstrap().bind(host: configuration.host, port: configuration.port).get()
        } catch {
            let failure = AgentServerError(
                "cannot listen on \(configuration.host):\(configuration.port): \(error). Is another agent running, or is the address wrong?"
            )
            addressPromise.fail(failure)
            throw failure
        }
        router.capture?.start()
        spoolThread.start()
        // Recordings a previous run left open are closed on the spool's thread, once it runs.
        router.recordings?.closeCutShortRecordingsInBackground()
        if let address = channel.localAddress {
            // Clock probes over UDP on the same port number as the TLS listener.
            clockChannel.start(host: configuration.host, port: address.port ?? configuration.port)
            addressPromise.succeed(address)
            logger.info("listening", metadata: ["address": "\(address)", "agent": "\(configuration.agentID)"])
        }
        if case .insecure = configuration.security {
            logger.warning("running WITHOUT TLS (--insecure): any client on the network has full control of this agent")
        }
        try await withGracefulShutdownHandler {
            try await channel.closeFuture.get()
        } onGracefulShutdown: {
            self.logger.info("shutting down: closing the listener and saying goodbye to clients")
            channel.close(promise: nil)
        }
        clockChannel.stop()
        // Pending triggers are answered SHUTTING_DOWN while their clients are still connected; photos
        // already fired are stored (their results wait in the spool) before the process goes.
        router.capture?.shutdown()
        // Open streams end with StreamEnded (SHUTTING_DOWN) before their clients get Goodbye.
        router.phaseLocks?.stopAll()
        router.streams?.stopAll(message: "agent \(configuration.agentID) is shutting down")
        // Recordings close their files as they are (the tracks say the agent shut down).
        await router.recordings?.stopAll()
        await connections.closeAll(reason: "agent \(configuration.agentID) is shutting down")
        await router.capture?.drain()
        try? await spoolThread.shutdownGracefully()
        logger.info("stopped")
    }

    private func makeBootstrap() -> ServerBootstrap {
        let configuration = self.configuration
        let connections = self.connections
        let logger = self.logger
        let router = self.router
        let deferAccept = ChannelOptions.Types.SocketOption(level: SocketOptionLevel(IPPROTO_TCP), name: SocketOptionName(TCP_DEFER_ACCEPT))
        let deferSeconds = SocketOptionValue(configuration.handshakeTimeoutSeconds)
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // A connection reaches the agent only once its client has sent something (its ClientHello):
            // silent connections wait in the kernel and cost the agent nothing (Linux's TCP_DEFER_ACCEPT).
            .serverChannelOption(deferAccept, value: deferSeconds)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                var connectionLogger = logger
                connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress.map { "\($0)" } ?? "?")"
                guard let id = connections.admit(channel) else { return channel.close() }
                do {
                    try channel.pipeline.syncOperations.addHandler(HandshakeActivity(id: id, registry: connections))
                    let verification = try Self.configurePipeline(
                        channel: channel,
                        id: id,
                        configuration: configuration,
                        router: router,
                        admission: { id, isCoordinator in connections.authenticate(id, isCoordinator: isCoordinator) },
                        logger: connectionLogger
                    )
                    if let verification { connections.attach(id, verification: verification) }
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
    }

    /// Installs the connection's handlers. Exposed to the module for tests over `EmbeddedChannel`.
    ///
    /// - Parameters:
    ///   - id: the connection's id (its leases are bound to it).
    ///   - admission: asked once the client completed TLS and `Hello`: `nil` when it may stay, else why not.
    /// - Returns: where the client's certificate verdict lands, for TLS connections.
    @discardableResult
    static func configurePipeline(
        channel: any Channel,
        id: UInt64,
        configuration: AgentConfiguration,
        router: AgentRequestRouter,
        admission: @escaping @Sendable (_ id: UInt64, _ isCoordinator: Bool) -> String? = { _, _ in nil },
        logger: Logger
    ) throws -> PeerVerificationRecord? {
        let handlers = channel.pipeline.syncOperations
        var verification: PeerVerificationRecord?
        var insecureClient: ServerConnectionStateMachine.Client?
        switch configuration.security {
        case .tls(let tls):
            let record = PeerVerificationRecord()
            verification = record
            try handlers.addHandler(tls.makeServerHandler(recordingInto: record))
        case .insecure:
            insecureClient = .init(role: .coordinator, name: "insecure-client")
        }
        try handlers.addHandler(ByteToMessageHandler(WireFrameDecoder(maxFrameLength: configuration.maxFrameLength)))
        try handlers.addHandler(WireFrameEncoder())
        try handlers.addHandler(
            AgentConnectionHandler(
                connectionID: id,
                admission: admission,
                configuration: configuration.handshake,
                handshakeTimeout: configuration.handshakeTimeout,
                idleTimeout: configuration.idleTimeout,
                verification: verification,
                insecureClient: insecureClient,
                router: router,
                clock: configuration.clock,
                logger: logger
            )
        )
        return verification
    }
}

/// Tells the registry when an unauthenticated connection sends bytes, so that a flood's stalled
/// connections are shed before one in the middle of its handshake. `AgentConnectionHandler` removes it
/// once the client's certificate is verified.
final class HandshakeActivity: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let id: UInt64
    private let registry: ConnectionRegistry

    init(id: UInt64, registry: ConnectionRegistry) {
        self.id = id
        self.registry = registry
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        registry.received(id)
        context.fireChannelRead(data)
    }
}

/// The agent could not start or run.
public struct AgentServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The open connections in their two budgets (`ConnectionBudget`), so that shutdown can reach each one
/// and a peer without a certificate cannot take a client's place.
final class ConnectionRegistry: Sendable {
    private struct State {
        var budget: ConnectionBudget
        var channels: [UInt64: any Channel] = [:]
        /// Each TLS connection's certificate verdict and chain, judged again when the TLS directory is reloaded.
        var verifications: [UInt64: PeerVerificationRecord] = [:]
        var nextID: UInt64 = 1
        /// When shed connections were last summarized in the log, and the counts then.
        var summarizedAt: Int64 = 0
        var summarized = ConnectionBudget.Counts()
    }

    private let state: NIOLockedValueBox<State>
    private let logger: Logger
    /// Shed connections are summarized in the log at most this often (a flood must not flood the log).
    static let summaryInterval: Int64 = 10_000_000_000

    init(limits: ConnectionBudget.Limits, logger: Logger) {
        state = NIOLockedValueBox(State(budget: ConnectionBudget(limits: limits)))
        self.logger = logger
    }

    var count: Int { state.withLockedValue { $0.channels.count } }

    /// What was shed so far.
    var counts: ConnectionBudget.Counts { state.withLockedValue { $0.budget.counts } }

    /// Takes a new connection into the unauthenticated budget and returns its id, closing the oldest
    /// unauthenticated connection when that makes room; `nil` when it is refused (the caller closes it).
    func admit(_ channel: any Channel) -> UInt64? {
        let address = channel.remoteAddress?.ipAddress ?? "unknown"
        let (id, admission) = state.withLockedValue { state -> (UInt64, ConnectionBudget.Admission) in
            let id = state.nextID
            state.nextID += 1
            let admission = state.budget.connect(id, address: address, now: HostClock.monotonicNow())
            if case .refuse = admission {} else { state.channels[id] = channel }
            return (id, admission)
        }
        switch admission {
        case .admit:
            break
        case .admitEvicting(let old):
            if let evicted = state.withLockedValue({ $0.channels[old] }) {
                logger.debug("closing an unauthenticated connection to make room for a new one", metadata: ["peer": "\(evicted.remoteAddress.map { "\($0)" } ?? "?")"])
                evicted.close(promise: nil)
            }
        case .refuse(let reason):
            logger.debug("refusing connection", metadata: ["peer": "\(address)", "reason": "\(reason)"])
            summarizeShedding()
            return nil
        }
        summarizeShedding()
        channel.closeFuture.whenComplete { _ in
            self.state.withLockedValue { state in
                state.channels.removeValue(forKey: id)
                state.verifications.removeValue(forKey: id)
                state.budget.disconnect(id)
            }
        }
        return id
    }

    /// Keeps connection `id`'s certificate verdict, to judge it again after a reload.
    func attach(_ id: UInt64, verification: PeerVerificationRecord) {
        state.withLockedValue { state in
            if state.channels[id] != nil { state.verifications[id] = verification }
        }
    }

    /// Judges every authenticated connection's certificate again with `verifier` and closes, with a
    /// Goodbye saying why, those it now refuses (a revoked certificate). Returns the refusals.
    func recheck(with verifier: PeerCertificateVerifier) async -> [PeerRefusal] {
        let open = state.withLockedValue { state in
            state.verifications.compactMap { id, record in
                state.channels[id].map { (channel: $0, record: record) }
            }
        }
        var refusals: [PeerRefusal] = []
        // Accepted peers, and peers whose certificate is being judged right now (possibly with the list
        // from before the reload).
        for (channel, record) in open where record.acceptedIdentity != nil || (record.outcome == nil && !record.chain.isEmpty) {
            let outcome = await verifier.verify(chain: record.chain)
            guard case .refused(let refusal) = outcome else { continue }
            record.outcome = outcome
            refusals.append(refusal)
            logger.warning(
                "closing a connection whose certificate is now refused: \(refusal.message)",
                metadata: ["peer": "\(channel.remoteAddress.map { "\($0)" } ?? "?")", "reason": "\(refusal.reason.rawValue)"]
            )
            channel.pipeline.fireUserInboundEventTriggered(AgentShutdownEvent(reason: refusal.message))
        }
        return refusals
    }

    /// Unauthenticated connection `id` sent bytes: it is making progress.
    func received(_ id: UInt64) {
        let now = HostClock.monotonicNow()
        state.withLockedValue { $0.budget.received(id, now: now) }
    }

    /// Connection `id` completed TLS and `Hello`; `nil` when it may stay, else why not.
    func authenticate(_ id: UInt64, isCoordinator: Bool) -> String? {
        let refusal = state.withLockedValue { $0.budget.authenticate(id, isCoordinator: isCoordinator) }
        if refusal != nil { summarizeShedding() }
        return refusal
    }

    /// Logs what was shed since the last summary, at most once per `summaryInterval`.
    private func summarizeShedding() {
        let now = HostClock.monotonicNow()
        let news = state.withLockedValue { state -> (ConnectionBudget.Counts, ConnectionBudget.Counts)? in
            let counts = state.budget.counts
            guard counts != state.summarized, now - state.summarizedAt >= Self.summaryInterval else { return nil }
            defer {
                state.summarized = counts
                state.summarizedAt = now
            }
            return (counts, state.summarized)
        }
        guard let (counts, before) = news else { return }
        let evicted = counts.evicted - before.evicted
        let refusedPerAddress = counts.refusedPerAddress - before.refusedPerAddress
        let refusedClients = counts.refusedClients - before.refusedClients
        var metadata: Logger.Metadata = [:]
        metadata["evicted"] = "\(evicted)"
        metadata["refused_per_address"] = "\(refusedPerAddress)"
        metadata["refused_clients"] = "\(refusedClients)"
        metadata["evicted_total"] = "\(counts.evicted)"
        metadata["refused_per_address_total"] = "\(counts.refusedPerAddress)"
        metadata["refused_clients_total"] = "\(counts.refusedClients)"
        logger.warning(
            "shedding connections: unauthenticated connections closed to make room, refused per address, or clients refused over the limit",
            metadata: metadata)
    }

    /// Asks every connection to say goodbye and close; waits up to five seconds for them.
    func closeAll(reason: String) async {
        let open = state.withLockedValue { Array($0.channels.values) }
        for channel in open {
            channel.pipeline.fireUserInboundEventTriggered(AgentShutdownEvent(reason: reason))
        }
        for channel in open {
            let closed = channel.closeFuture
            let timeout = channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
            try? await closed.get()
            timeout.cancel()
        }
    }
}

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
    private let connections = ConnectionRegistry()
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
        let streams = configuration.devices.map { AgentStreams(devices: $0, logger: logger) }
        let phaseLocks = streams.map { AgentPhaseLocks(streams: $0, logger: logger) }
        if let phaseLocks {
            // A phase lock lives under its device's lease: when the lease ends, so does the lock.
            // A vanished device's lock stays listed as cannot-lock, saying why, until it is locked again.
            configuration.devices?.leaseEnded.withLockedValue {
                $0 = { [weak phaseLocks] deviceID, vanished in
                    if vanished { phaseLocks?.deviceVanished(deviceID: deviceID) } else { phaseLocks?.unlock(deviceID: deviceID) }
                }
            }
        }
        let capture: AgentCapture? =
            if let streams, let phaseLocks, let spool = configuration.spool {
                AgentCapture(streams: streams, phaseLocks: phaseLocks, spool: spool, agentID: configuration.agentID, logger: logger)
            } else {
                nil
            }
        clockChannel = ClockChannelServer(clock: configuration.clock, logger: logger)
        let spoolThread = NIOThreadPool(numberOfThreads: 1)
        self.spoolThread = spoolThread
        router = AgentRequestRouter(
            agentID: configuration.agentID,
            devices: configuration.devices,
            streams: streams,
            capture: capture,
            results: configuration.spool.map { [spoolThread] in ResultService(spool: $0, agentID: configuration.agentID, threadPool: spoolThread) },
            clockChannel: clockChannel,
            phaseLocks: phaseLocks
        )
    }

    /// The address the server listens on, once bound (useful with port 0).
    public var localAddress: SocketAddress {
        get async throws { try await addressPromise.futureResult.get() }
    }

    /// Number of open client connections.
    public var connectionCount: Int { connections.count }

    public func run() async throws {
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if let devices = configuration.devices { services.append(.init(service: devices)) }
        services.append(.init(service: Listener(server: self)))
        try await ServiceGroup(configuration: .init(services: services, logger: logger)).run()
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
        await connections.closeAll(reason: "agent \(configuration.agentID) is shutting down")
        router.phaseLocks?.stopAll()
        router.streams?.stopAll(message: "agent is shutting down")
        await router.capture?.drain()
        try? await spoolThread.shutdownGracefully()
        logger.info("stopped")
    }

    private func makeBootstrap() -> ServerBootstrap {
        let configuration = self.configuration
        let connections = self.connections
        let logger = self.logger
        let router = self.router
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                var connectionLogger = logger
                connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress.map { "\($0)" } ?? "?")"
                guard connections.add(channel, limit: configuration.maxConnections) else {
                    connectionLogger.warning("refusing connection: already \(configuration.maxConnections) clients (--max-connections)")
                    return channel.close()
                }
                do {
                    try Self.configurePipeline(
                        channel: channel,
                        configuration: configuration,
                        router: router,
                        logger: connectionLogger
                    )
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
    }

    /// Installs the connection's handlers. Exposed to the module for tests over `EmbeddedChannel`.
    static func configurePipeline(
        channel: any Channel,
        configuration: AgentConfiguration,
        router: AgentRequestRouter,
        logger: Logger
    ) throws {
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
    }
}

/// The agent could not start or run.
public struct AgentServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The open client connections, so shutdown can reach each one.
final class ConnectionRegistry: Sendable {
    private let channels = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    var count: Int { channels.withLockedValue { $0.count } }

    /// Adds the channel unless `limit` connections are open; removes it again when it closes.
    func add(_ channel: any Channel, limit: Int) -> Bool {
        let id = ObjectIdentifier(channel)
        let added = channels.withLockedValue { channels in
            guard channels.count < limit else { return false }
            channels[id] = channel
            return true
        }
        if added {
            channel.closeFuture.whenComplete { _ in
                _ = self.channels.withLockedValue { $0.removeValue(forKey: id) }
            }
        }
        return added
    }

    /// Asks every connection to say goodbye and close; waits up to five seconds for them.
    func closeAll(reason: String) async {
        let open = channels.withLockedValue { Array($0.values) }
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

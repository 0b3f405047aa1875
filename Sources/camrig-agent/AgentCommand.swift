import CamRigClock
import ArgumentParser
import CamRigCLI
import CamRigAgent
import CamRigDevices
import CamRigSecurity
import CamRigWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import UnixSignals

/// `camrig-agent`: serves this host's cameras to the rig's coordinator.
@main
struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "camrig-agent",
        abstract: "Serve this host's cameras to a CamRig coordinator over TLS.",
        discussion: """
            Prints `listening HOST:PORT` on standard output once it accepts connections; logs go to \
            standard error. SIGTERM or SIGINT stop it gracefully: clients are told goodbye.
            """,
        version: "camrig-agent \(CamRigVersion.string)"
    )

    @Option(name: .long, help: ArgumentHelp("Configuration file (YAML, see deploy/agent.yaml); flags override it.", valueName: "file"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("Address to listen on; port 0 picks a free one (default 0.0.0.0:7450).", valueName: "host:port"))
    var listen: String?

    @Option(name: .long, help: ArgumentHelp("Join a rig: enroll with `camrig serve` at this address (https://HOST[:PORT]) when the TLS directory holds no agent certificate yet; once enrolled, renew the certificate and fetch the revocation list from it.", valueName: "url"))
    var enroll: String?

    @Option(name: .long, help: ArgumentHelp("The join token for --enroll (`camrig certs join-token`; or $CAMRIG_JOIN_TOKEN, which stays out of the process list).", valueName: "token"))
    var token: String?

    @Option(name: .long, help: ArgumentHelp("With --enroll: the address the coordinator should connect to (default: the address the agent enrolls from).", valueName: "host"))
    var enrollHost: String?

    @Option(name: .long, help: ArgumentHelp("Seconds between fetches of the rig's revocation list from the service, once enrolled (default 60).", valueName: "s"))
    var crlRefresh: Int?

    @OptionGroup(title: "TLS")
    var tls: TLSOptions

    @Option(name: .long, help: "Agent id announced to clients (default: the certificate's name, or the host name with --insecure).")
    var agentID: String?

    @Option(name: .long, help: "Seconds a client has to complete TLS and send hello (default 5).")
    var handshakeTimeout: Int?

    @Option(name: .long, help: "Seconds of silence after which a client connection is closed (default 120).")
    var idleTimeout: Int?

    @Option(name: .long, help: "Most authenticated clients served at once (default 64); 8 of them are kept for coordinators.")
    var maxConnections: Int?

    @Option(name: .long, help: "Most connections still in TLS or hello at once (default 32); beyond it a new one replaces the oldest.")
    var maxUnauthenticated: Int?

    @Option(name: .long, help: "Most connections still in TLS or hello from one address (default 4); more are refused.")
    var maxUnauthenticatedPerAddress: Int?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical (default info).")
    var logLevel: Logger.Level?

    @Flag(name: .long, help: "Print the devices this agent would serve (formats, frame-rate ranges, controls) and exit.")
    var listDevices = false

    @Option(name: .long, help: "Serve N synthetic cameras.")
    var synthetic: Int?

    @Option(name: .long, help: ArgumentHelp("V4L2 device nodes to serve, as a glob (repeatable; default /dev/video* unless --synthetic is given).", valueName: "glob"))
    var v4l2: [String] = []

    @Flag(inversion: .prefixedNo, help: "Serve the cameras libcamera lists (Raspberry Pi CSI cameras; default: yes unless --synthetic is given, when this agent was built with libcamera).")
    var libcamera: Bool?

    @Flag(name: [.customLong("copy-frames"), .customLong("v4l2-copy-frames")], help: "Copy each V4L2 or libcamera frame out of the camera's buffer instead of sending it from there (for a driver whose buffers must not be held; costs a copy per frame).")
    var v4l2CopyFrames = false

    @Option(name: .long, help: ArgumentHelp("Directory of the result spool (default: $STATE_DIRECTORY/spool under systemd, else ~/.local/state/camrig/spool).", valueName: "dir"))
    var spoolDir: String?

    @Option(name: .long, help: "Largest size of the result spool in MiB (default 1024); captures beyond it are refused, never older results dropped.")
    var spoolSizeMb: Int?

    @Option(name: .long, help: "Most space on-host recordings may take in MiB (in the spool directory's 'recordings' folder; default: the disk's free space less 256 MiB). A recording that would not fit is refused before it starts.")
    var recordingSpaceMb: Int?

    @Option(name: .long, help: "Seed of the synthetic cameras' serials and noise (default 1); give each simulated host its own.")
    var syntheticSeed: UInt64 = 1

    @Option(name: .long, help: ArgumentHelp("Step the simulated clock by this many microseconds (as when a clock is set), --simulate-clock-step-after seconds after start.", valueName: "us"))
    var simulateClockStepUs: Double?

    @Option(name: .long, help: ArgumentHelp("Seconds after start at which the simulated clock steps (default 5).", valueName: "s"))
    var simulateClockStepAfter: Double = 5

    @Flag(name: .long, help: "Synthetic cameras also offer 1920x1080 YUYV at up to 1000 fps (a source for throughput benchmarks).")
    var syntheticHighSpeed = false

    @Option(name: .long, help: ArgumentHelp("Simulate a host whose clock is off by this many microseconds (its synthetic cameras and the stamps of its V4L2 cameras; for tests, demos and emulated rigs).", valueName: "us"))
    var simulateClockOffsetUs: Double?

    @Option(name: .long, help: ArgumentHelp("Simulate a host whose clock drifts by this many parts per million (as --simulate-clock-offset-us).", valueName: "ppm"))
    var simulateClockDriftPpm: Double?

    @Option(name: .long, help: ArgumentHelp("CLOCK_MONOTONIC instant from which the simulated drift accumulates (default: when the agent starts).", valueName: "ns"))
    var simulateClockEpochNs: Int64?

    @Option(name: .long, help: ArgumentHelp("Simulate N camera hosts in this one process (benchmarks of many agents): each an agent of its own with its own listener (on --listen's host, port 0 each), certificate (--identity PREFIX gives PREFIX-K, default agent-K), spool (under --spool-dir), clock and --synthetic cameras. Prints one line, 'hosts NAME=HOST:PORT …', once all listen.", valueName: "N"))
    var hosts: Int?

    @Option(name: .long, help: ArgumentHelp("With --hosts: the number K of the first simulated host (default 1).", valueName: "K"))
    var firstHost = 1

    @Flag(name: .long, help: "With --hosts: give simulated host K the clock error of the rig harness's host K (milliseconds of offset, tens of ppm of drift).")
    var simulateHostClockErrors = false

    @Flag(name: .customLong("no-realtime"), help: "Do not ask for real-time priority (SCHED_FIFO) and a 1 ns timer slack for the trigger thread, nor to lock memory.")
    var noRealtime = false

    @Flag(name: .long, help: "With --list-devices: print JSON.")
    var json = false

    /// Flags over the configuration file over defaults, checked.
    struct Settings {
        /// The agent's configuration from these settings, for one agent (of several, when simulating hosts).
        func configuration(
            port: Int, security: AgentConfiguration.Security, agentID: String, devices: AgentDevices, spool: ResultSpool, realtimeTriggers: Bool
        ) -> AgentConfiguration {
            AgentConfiguration(
                host: listenHost,
                port: port,
                security: security,
                agentID: agentID,
                handshakeTimeout: .seconds(Int64(handshakeTimeout)),
                idleTimeout: .seconds(Int64(idleTimeout)),
                maxConnections: maxConnections,
                maxUnauthenticated: maxUnauthenticated,
                maxUnauthenticatedPerAddress: maxUnauthenticatedPerAddress,
                devices: devices,
                spool: spool,
                recordingSpaceBytes: recordingSpaceMB.map { UInt64($0) << 20 },
                realtimeTriggers: realtimeTriggers
            )
        }

        var listenHost: String
        var listenPort: Int
        var tlsDir: String?
        var identity: String?
        var insecure: Bool
        var agentID: String?
        var handshakeTimeout: Int
        var idleTimeout: Int
        var maxConnections: Int
        var maxUnauthenticated: Int
        var maxUnauthenticatedPerAddress: Int
        var logLevel: Logger.Level
        var synthetic: Int
        var v4l2: [String]
        var spoolDir: String
        var spoolSizeMB: Int
        var recordingSpaceMB: Int?
        var syntheticSeed: UInt64
        var syntheticHighSpeed = false
        var v4l2CopyFrames = false
        var libcamera = false
        var clock: HostClock
        var enroll: String?
        var token: String?
        var enrollHost: String?
        var revocationRefresh = 60
    }

    func settings() throws -> Settings {
        let file = try config.map { path -> AgentConfigurationFile in
            do { return try AgentConfigurationFile(contentsOf: path) } catch { throw ValidationError("\(error)") }
        } ?? AgentConfigurationFile()
        let listenText = listen ?? file.listen ?? "0.0.0.0:\(WireProtocol.defaultPort)"
        guard let address = AgentEndpoint(listenText, forListening: true) else {
            throw ValidationError("listen address '\(listenText)' is not HOST:PORT")
        }
        var level = logLevel ?? .info
        if logLevel == nil, let text = file.logLevel {
            guard let parsed = Logger.Level(rawValue: text) else { throw ValidationError("log_level '\(text)' is not one of trace, debug, info, notice, warning, error, critical") }
            level = parsed
        }
        var settings = Settings(
            listenHost: address.host,
            listenPort: address.port,
            tlsDir: tls.tlsDir ?? file.tlsDir,
            identity: tls.identity ?? file.identity,
            insecure: tls.insecure || file.insecure == true,
            agentID: agentID ?? file.agentID,
            handshakeTimeout: handshakeTimeout ?? file.limits?.handshakeTimeoutSeconds ?? 5,
            idleTimeout: idleTimeout ?? file.limits?.idleTimeoutSeconds ?? 120,
            maxConnections: maxConnections ?? file.limits?.maxConnections ?? 64,
            maxUnauthenticated: maxUnauthenticated ?? file.limits?.maxUnauthenticated ?? 32,
            maxUnauthenticatedPerAddress: maxUnauthenticatedPerAddress ?? file.limits?.maxUnauthenticatedPerAddress ?? 4,
            logLevel: level,
            synthetic: synthetic ?? file.devices?.synthetic ?? 0,
            v4l2: v4l2.isEmpty ? (file.devices?.v4l2 ?? []) : v4l2,
            spoolDir: spoolDir ?? file.spool?.dir
                ?? ProcessInfo.processInfo.environment["STATE_DIRECTORY"].map { "\($0)/spool" }
                ?? "\(NSHomeDirectory())/.local/state/camrig/spool",
            spoolSizeMB: spoolSizeMb ?? file.spool?.sizeMB ?? 1024,
            recordingSpaceMB: recordingSpaceMb ?? file.spool?.recordingSpaceMB,
            syntheticSeed: syntheticSeed,
            clock: .system
        )
        settings.syntheticHighSpeed = syntheticHighSpeed
        settings.enroll = enroll ?? file.enroll?.url
        settings.token = token ?? ProcessInfo.processInfo.environment["CAMRIG_JOIN_TOKEN"] ?? file.enroll?.token
        settings.enrollHost = enrollHost ?? file.enroll?.host
        settings.revocationRefresh = crlRefresh ?? file.enroll?.revocationRefreshSeconds ?? 60
        guard settings.revocationRefresh > 0 else { throw ValidationError("the revocation list's refresh interval must be positive") }
        settings.v4l2CopyFrames = v4l2CopyFrames
        settings.libcamera = libcamera ?? file.devices?.libcamera ?? (settings.synthetic == 0 && LibcameraManager.isAvailable)
        guard (0...64).contains(settings.synthetic) else { throw ValidationError("synthetic cameras must be within 0…64") }
        if simulateClockOffsetUs != nil || simulateClockDriftPpm != nil || simulateClockStepUs != nil {
            let offset = simulateClockOffsetUs ?? 0
            let drift = simulateClockDriftPpm ?? 0
            guard abs(offset) <= 3_600_000_000, abs(drift) <= 1000 else {
                throw ValidationError("simulated clock offset must be within ±1 h and drift within ±1000 ppm")
            }
            settings.clock = HostClock(
                offsetNanoseconds: Int64((offset * 1000).rounded()),
                driftPPM: drift,
                epoch: simulateClockEpochNs ?? HostClock.monotonicNow()
            )
            if let step = simulateClockStepUs {
                guard abs(step) <= 3_600_000_000, simulateClockStepAfter >= 0 else { throw ValidationError("a simulated clock step must be within ±1 h, after a non-negative delay") }
                settings.clock.stepNanoseconds = Int64((step * 1000).rounded())
                settings.clock.stepAtMonotonic = HostClock.monotonicNow() + Int64(simulateClockStepAfter * 1e9)
            }
        }
        guard settings.spoolSizeMB > 0 else { throw ValidationError("the spool size must be positive") }
        if let space = settings.recordingSpaceMB, space < 0 { throw ValidationError("the recording space must not be negative") }
        guard settings.handshakeTimeout > 0, settings.idleTimeout > 0, settings.maxConnections > 0,
            settings.maxUnauthenticated > 0, settings.maxUnauthenticatedPerAddress > 0
        else {
            throw ValidationError("timeouts and the connection limits must be positive")
        }
        if let hosts, !(1...4000).contains(hosts) { throw ValidationError("--hosts must be within 1…4000") }
        if listDevices { return settings }
        settings.tlsDir = try tls.directory(fallback: file.tlsDir, fallbackInsecure: file.insecure == true, from: "the configuration file's tls_dir")
        return settings
    }

    /// The device sources the settings select.
    /// The device sources the settings select, and why devices they found were skipped (by node or id).
    static func providers(_ settings: Settings) -> (providers: [any DeviceProvider], skipped: @Sendable () -> [String: String]) {
        var providers: [any DeviceProvider] = []
        if settings.synthetic > 0 {
            providers.append(SyntheticDeviceProvider(count: settings.synthetic, seed: settings.syntheticSeed, clock: settings.clock, highSpeed: settings.syntheticHighSpeed))
        }
        // libcamera first: the V4L2 nodes its cameras use are left to it.
        var libcameraProvider: LibcameraDeviceProvider?
        if settings.libcamera {
            let provider = LibcameraDeviceProvider(clock: settings.clock, lendFrames: !settings.v4l2CopyFrames)
            providers.append(provider)
            libcameraProvider = provider
        }
        var v4l2Provider: V4L2DeviceProvider?
        if !settings.v4l2.isEmpty || settings.synthetic == 0 {
            var claimed: (@Sendable () -> Set<UInt64>)?
            if let libcameraProvider { claimed = { libcameraProvider.claimedDevices } }
            let provider = V4L2DeviceProvider(
                patterns: settings.v4l2.isEmpty ? ["/dev/video*"] : settings.v4l2, clock: settings.clock, lendFrames: !settings.v4l2CopyFrames,
                claimedElsewhere: claimed)
            providers.append(provider)
            v4l2Provider = provider
        }
        let (v4l2, libcamera) = (v4l2Provider, libcameraProvider)
        return (providers, {
            var skipped = v4l2?.skipped ?? [:]
            for (id, reason) in libcamera?.skipped ?? [:] { skipped[id == "libcamera" ? id : "libcamera:\(id)"] = reason }
            return skipped
        })
    }

    func run() async throws {
        var settings = try settings()
        let enrolled = settings.tlsDir.map { TLSDirectory(path: $0).enrollmentState() != nil } ?? false
        if settings.enroll != nil || enrolled, settings.listenPort == 0 {
            // The service is told the port (when joining, and with each renewal) before the agent listens: a
            // free one is chosen now.
            settings.listenPort = try await FreePort.choose(host: settings.listenHost)
        }
        let level = settings.logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        if listDevices {
            let (providers, skipped) = Self.providers(settings)
            let discovery = DeviceDiscovery(providers: providers)
            let listing = DeviceListing(devices: discovery.devices, skipped: skipped())
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                print(String(decoding: try encoder.encode(listing), as: UTF8.self))
            } else {
                print(listing.text)
            }
            return
        }
        if let hosts {
            try await HostSimulation(settings: settings, count: hosts, first: firstHost, clockErrors: simulateHostClockErrors,
                epoch: simulateClockEpochNs ?? HostClock.monotonicNow()
            ).run()
            return
        }
        let logger = Logger(label: "camrig.agent")
        let discovery = DeviceDiscovery(providers: Self.providers(settings).providers)
        let spool: ResultSpool
        do {
            spool = try ResultSpool(directory: URL(fileURLWithPath: settings.spoolDir), capacityBytes: UInt64(settings.spoolSizeMB) << 20)
        } catch {
            throw ValidationError("cannot use \(settings.spoolDir) as the result spool: \(error); choose one with --spool-dir")
        }
        if spool.count > 0 {
            logger.info("results waiting in the spool from before", metadata: ["results": "\(spool.count)", "bytes": "\(spool.usedBytes)"])
        }
        logger.info("serving devices", metadata: ["devices": "\(discovery.devices.map(\.uniqueID).joined(separator: ", "))"])
        if !noRealtime {
            // Pages touched from now on stay resident: the trigger thread never waits for one to be read back.
            if let refusal = RealtimeScheduling.lockMemory() {
                logger.warning("memory not locked: a trigger may wait for paged-out memory", metadata: ["reason": "\(refusal)"])
            } else {
                logger.info("memory locked (pages stay resident once touched)")
            }
        }

        let security: AgentConfiguration.Security
        let agentName: String
        var enrollment: AgentEnrollment?
        do {
            if settings.insecure {
                security = .insecure
                agentName = settings.agentID ?? ProcessInfo.processInfo.hostName
            } else {
                let directory = TLSDirectory(path: settings.tlsDir!)
                do {
                    enrollment = try await Self.enrollIfNeeded(settings, directory: directory, logger: logger)
                } catch let error as SecurityError {
                    // Not a usage error: no usage text, and systemd restarts the agent to try again.
                    logger.error("enrollment failed", metadata: ["reason": "\(error.message)"])
                    throw CommandFailure("enrollment failed: \(error.message)")
                }
                let tls = try MutualTLS.agent(directory: directory, identityName: directory.enrollmentState()?.name ?? settings.identity)
                security = .tls(tls)
                agentName = settings.agentID ?? tls.identity.name
            }
        } catch let error as SecurityError {
            throw ValidationError(error.message)
        }

        let server = AgentServer(
            configuration: settings.configuration(
                port: settings.listenPort, security: security, agentID: agentName,
                devices: AgentDevices(discovery: discovery, agentID: agentName, clock: settings.clock, logger: logger),
                spool: spool, realtimeTriggers: !noRealtime),
            logger: logger
        )
        // SIGHUP never ends the agent (`systemctl reload`); without TLS there is nothing to re-read.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: server),
            .init(service: ReloadOnHangup(server: server, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup),
        ]
        if let enrollment {
            services.append(
                .init(service: EnrollmentMaintenance(enrollment: enrollment, revocationInterval: .seconds(settings.revocationRefresh), logger: logger) {
                    _ = try await server.reloadTLS()
                }))
        }
        let group = ServiceGroup(
            configuration: .init(
                services: services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        let announce = Task {
            guard let address = try? await server.localAddress else { return }
            // Unbuffered, so a supervising script sees it at once even through a pipe.
            FileHandle.standardOutput.write(Data("listening \(address.ipAddress ?? settings.listenHost):\(address.port ?? settings.listenPort)\n".utf8))
        }
        defer { announce.cancel() }
        try await group.run()
    }

    /// With --enroll: joins the rig when the TLS directory has no agent certificate yet. Returns the
    /// enrollment to maintain (renewal, revocation list) when the directory's certificate came from one.
    static func enrollIfNeeded(_ settings: Settings, directory: TLSDirectory, logger: Logger) async throws -> AgentEnrollment? {
        let kept = directory.enrollmentState()
        guard let url = settings.enroll ?? kept?.url else { return nil }
        // A renewal a power cut stopped between its key and its certificate is finished first.
        for name in try directory.finishInterruptedInstall() {
            logger.notice("finished installing a renewed certificate that a stop had interrupted", metadata: ["name": "\(name)"])
        }
        let enrollment = try AgentEnrollment(url: url, directory: directory, port: settings.listenPort)
        // A certificate in force is kept; an expired one is replaced when a token is given.
        let current = ((try? directory.entries()) ?? []).filter { $0.identity.role == .agent }
        if current.contains(where: { $0.certificate.notValidAfter > Date() }) || (!current.isEmpty && settings.token == nil) {
            return kept == nil ? nil : enrollment
        }
        guard let token = settings.token else {
            throw SecurityError(
                "\(directory.path) holds no agent certificate, and --enroll needs a join token to get one: give --token (or CAMRIG_JOIN_TOKEN, or enroll.token in agent.yaml) from `camrig certs join-token` on the coordinator")
        }
        let name = settings.identity ?? settings.agentID ?? AgentEnrollment.name(fromHost: ProcessInfo.processInfo.hostName)
        logger.notice("enrolling", metadata: ["service": "\(url)", "name": "\(name)", "token": "\((try? JoinToken(text: token))?.description ?? "?")"])
        let state = try await enrollment.enroll(token: token, name: name, host: settings.enrollHost)
        logger.notice("enrolled", metadata: ["name": "\(state.name)", "valid_until": "\(state.notValidAfter)", "renew_after": "\(state.renewAfter)"])
        return enrollment
    }
}

/// A TCP port free on `host` now, for an agent that must name its port before it listens.
enum FreePort {
    static func choose(host: String) async throws -> Int {
        let socket = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: host, port: 0).get()
        let port = socket.localAddress?.port
        try? await socket.close().get()
        guard let port else { throw ValidationError("cannot find a free port on \(host)") }
        return port
    }
}

/// Re-reads the TLS directory on SIGHUP (`systemctl reload camrig-agent`): a renewed certificate, a new
/// `crl.pem`. Connections stay up unless their peer's certificate is now revoked.
struct ReloadOnHangup: Service {
    let server: AgentServer
    let logger: Logger

    func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            logger.info("SIGHUP: re-reading the TLS directory")
            do {
                try await server.reloadTLS()
            } catch let error as AgentServerError {
                logger.notice("SIGHUP ignored: \(error)")
            } catch {
                // Logged by the server; the previous certificates stay in use.
            }
        }
    }
}

import ArgumentParser
import CamRigAgent
import CamRigDevices
import CamRigSecurity
import CamRigWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

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

    @Option(name: .long, help: ArgumentHelp("Address to listen on; port 0 picks a free one.", valueName: "host:port"))
    var listen = "0.0.0.0:\(WireProtocol.defaultPort)"

    @Option(name: .long, help: ArgumentHelp("Directory with ca.pem and this agent's certificate and key.", valueName: "dir"))
    var tlsDir: String?

    @Option(name: .long, help: ArgumentHelp("Certificate name to use (default: the only agent certificate in --tls-dir).", valueName: "name"))
    var identity: String?

    @Flag(name: .long, help: "Serve plaintext without authentication: every client may do everything. Development only.")
    var insecure = false

    @Option(name: .long, help: "Agent id announced to clients (default: the certificate's name, or the host name with --insecure).")
    var agentID: String?

    @Option(name: .long, help: "Seconds a client has to complete TLS and send hello.")
    var handshakeTimeout = 10

    @Option(name: .long, help: "Seconds of silence after which a client connection is closed.")
    var idleTimeout = 120

    @Option(name: .long, help: "Most client connections served at once.")
    var maxConnections = 64

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    @Flag(name: .long, help: "Print the devices this agent would serve (formats, frame-rate ranges, controls) and exit.")
    var listDevices = false

    @Option(name: .long, help: "Serve N synthetic cameras.")
    var synthetic = 0

    @Option(name: .long, help: ArgumentHelp("V4L2 device nodes to serve, as a glob (repeatable; default /dev/video* unless --synthetic is given).", valueName: "glob"))
    var v4l2: [String] = []

    @Option(name: .long, help: ArgumentHelp("Directory of the result spool (default: $STATE_DIRECTORY/spool under systemd, else ~/.local/state/camrig/spool).", valueName: "dir"))
    var spoolDir: String?

    @Option(name: .long, help: "Largest size of the result spool in MiB; captures beyond it are refused, never older results dropped.")
    var spoolSizeMb = 1024

    @Flag(name: .long, help: "With --list-devices: print JSON.")
    var json = false

    /// The device sources the options select.
    func providers() -> (providers: [any DeviceProvider], v4l2: V4L2DeviceProvider?) {
        var providers: [any DeviceProvider] = []
        if synthetic > 0 { providers.append(SyntheticDeviceProvider(count: synthetic)) }
        var v4l2Provider: V4L2DeviceProvider?
        if !v4l2.isEmpty || synthetic == 0 {
            let provider = V4L2DeviceProvider(patterns: v4l2.isEmpty ? ["/dev/video*"] : v4l2)
            providers.append(provider)
            v4l2Provider = provider
        }
        return (providers, v4l2Provider)
    }

    func validate() throws {
        guard synthetic >= 0, synthetic <= 64 else { throw ValidationError("--synthetic must be within 0…64") }
        guard spoolSizeMb > 0 else { throw ValidationError("--spool-size-mb must be positive") }
        if listDevices { return }
        guard let (_, port) = Self.split(listen), (0...65535).contains(port) else {
            throw ValidationError("--listen '\(listen)' is not HOST:PORT")
        }
        if insecure && tlsDir != nil { throw ValidationError("--insecure and --tls-dir exclude each other") }
        if !insecure && tlsDir == nil {
            throw ValidationError("TLS is required: pass --tls-dir DIR holding ca.pem and this agent's certificate (see `camrig certs`), or --insecure for development")
        }
        guard handshakeTimeout > 0, idleTimeout > 0, maxConnections > 0 else {
            throw ValidationError("timeouts and --max-connections must be positive")
        }
    }

    func run() async throws {
        if listDevices {
            let (providers, v4l2Provider) = providers()
            let discovery = DeviceDiscovery(providers: providers)
            let listing = DeviceListing(devices: discovery.devices, skipped: v4l2Provider?.skipped ?? [:])
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                print(String(decoding: try encoder.encode(listing), as: UTF8.self))
            } else {
                print(listing.text)
            }
            return
        }
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "camrig.agent")
        let (host, port) = Self.split(listen)!
        let discovery = DeviceDiscovery(providers: providers().providers)
        let spoolPath = spoolDir
            ?? ProcessInfo.processInfo.environment["STATE_DIRECTORY"].map { "\($0)/spool" }
            ?? "\(NSHomeDirectory())/.local/state/camrig/spool"
        let spool: ResultSpool
        do {
            spool = try ResultSpool(directory: URL(fileURLWithPath: spoolPath), capacityBytes: UInt64(spoolSizeMb) << 20)
        } catch {
            throw ValidationError("cannot use \(spoolPath) as the result spool: \(error); choose one with --spool-dir")
        }
        if spool.count > 0 {
            logger.info("results waiting in the spool from before", metadata: ["results": "\(spool.count)", "bytes": "\(spool.usedBytes)"])
        }
        logger.info("serving devices", metadata: ["devices": "\(discovery.devices.map(\.uniqueID).joined(separator: ", "))"])

        let security: AgentConfiguration.Security
        let agentName: String
        do {
            if insecure {
                security = .insecure
                agentName = agentID ?? ProcessInfo.processInfo.hostName
            } else {
                let tls = try MutualTLS.agent(directory: TLSDirectory(path: tlsDir!), identityName: identity)
                security = .tls(tls)
                agentName = agentID ?? tls.identity.name
            }
        } catch let error as SecurityError {
            throw ValidationError(error.message)
        }

        let server = AgentServer(
            configuration: AgentConfiguration(
                host: host,
                port: port,
                security: security,
                agentID: agentName,
                handshakeTimeout: .seconds(Int64(handshakeTimeout)),
                idleTimeout: .seconds(Int64(idleTimeout)),
                maxConnections: maxConnections,
                devices: AgentDevices(discovery: discovery, agentID: agentName, logger: logger),
                spool: spool
            ),
            logger: logger
        )
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: server)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        let announce = Task {
            guard let address = try? await server.localAddress else { return }
            // Unbuffered, so a supervising script sees it at once even through a pipe.
            FileHandle.standardOutput.write(Data("listening \(address.ipAddress ?? host):\(address.port ?? port)\n".utf8))
        }
        defer { announce.cancel() }
        try await group.run()
    }

    /// Splits `HOST:PORT` (IPv6 as `[ADDR]:PORT`).
    static func split(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

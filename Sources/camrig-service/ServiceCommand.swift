import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigSecurity
import CamRigService
import CamRigWire
import Foundation
import Logging
import ServiceLifecycle

/// `camrig-service`: the HTTP server of `camrig serve`, which resolves the rig (rig file, TLS directory,
/// identity) and runs this program with the result, so that `camrig` itself links no HTTP server. Run
/// through `camrig serve`; its options are `camrig serve`'s, resolved.
@main
struct ServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "camrig-service",
        abstract: "The HTTP server of `camrig serve` (run `camrig serve`, which starts this program).",
        version: "camrig-service \(CamRigVersion.string)"
    )

    @OptionGroup var serve: ServeOptions

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Where captures go: a directory, or s3://BUCKET/PREFIX, an S3-compatible store (the AWS_* variables, under the rig file's store: settings that camrig serve hands on). Default $CAMRIG_CAPTURES, else the rig file's store: url, else ./captures.",
            valueName: "dir|s3-url"))
    var out: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "With --out s3://…: this machine's folder for the catalog (catalog.sqlite, unless --catalog) and the store's work files. Default $CAMRIG_STATE, else ~/.local/state/camrig.",
            valueName: "dir"))
    var state: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The capture catalog, postgres://USER:PASSWORD@HOST:PORT/DB (default $CAMRIG_CATALOG; without either, catalog.sqlite in the captures directory).",
            valueName: "url"))
    var catalog: String?

    @Option(name: .long, help: ArgumentHelp("The rig's name, recorded with its captures (default: this host's name).", valueName: "name"))
    var rigName: String?

    @Option(name: .long, help: ArgumentHelp("An agent, HOST:PORT (repeatable).", valueName: "host:port"))
    var agent: [String] = []

    @Option(name: .long, help: ArgumentHelp("TLS directory: ca.pem and the coordinator's certificate.", valueName: "dir"))
    var tlsDir: String?

    @Option(name: .long, help: ArgumentHelp("The coordinator certificate's name in the TLS directory.", valueName: "name"))
    var identity: String?

    @Flag(name: .long, help: "Announce the address as one JSON object.")
    var json = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .warning

    func validate() throws {
        if serve.loopback == nil, (agent.isEmpty && !serve.enroll) || tlsDir == nil {
            throw ValidationError("give --loopback N, or --tls-dir and --agent (or --enroll, for agents that join with a token)")
        }
    }

    func run() async throws {
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "camrig.serve")
        let (host, port) = try serve.listenAddress()
        do {
            if let loopback = serve.loopback {
                let local = try await LoopbackRig(agents: LocalAgentSpec.simulated(count: loopback, cameras: serve.cameras), caName: "CamRig console CA")
                try await local.run {
                    let security = try local.clientSecurity()
                    let pool = AgentPool(endpoints: local.endpoints, security: security, logger: logger)
                    let tls: MutualTLS? = if case .tls(let tls) = security { tls } else { nil }
                    try await serve(
                        pool: pool, tls: tls, directory: local.pki.directory, identity: "coordinator", host: host, port: port, announceToken: true, logger: logger)
                }
            } else if let tlsDir {
                let endpoints = try agent.map { text in
                    guard let endpoint = AgentEndpoint(text) else { throw ValidationError("'\(text)' is not HOST[:PORT]") }
                    return endpoint
                }
                let directory = TLSDirectory(path: tlsDir)
                let tls = try MutualTLS.client(directory: directory, identityName: identity)
                let pool = AgentPool(endpoints: endpoints, security: .tls(tls), logger: logger)
                try await serve(pool: pool, tls: tls, directory: directory, identity: identity, host: host, port: port, announceToken: false, logger: logger)
            }
        } catch let error as SecurityError {
            throw CommandFailure(error.message)
        } catch let error as LocalAgentError {
            throw CommandFailure(error.description)
        }
    }

    private func serve(
        pool: AgentPool, tls: MutualTLS?, directory: TLSDirectory, identity: String?, host: String, port: Int, announceToken: Bool, logger: Logger
    ) async throws {
        let environment = ProcessInfo.processInfo.environment
        var configuration = RigService.Configuration(out: "", stateDirectory: stateDirectory)
        if let settings = environment[RigService.Configuration.storeSettingsVariable], !settings.isEmpty {
            configuration.storeSettings = try RigService.Configuration.storeSettings(json: settings)
        }
        configuration.out = out ?? environment["CAMRIG_CAPTURES"] ?? configuration.storeSettings.url ?? "captures"
        configuration.phaseLock = !serve.noPhaseLock
        if let rigName { configuration.rigName = rigName }
        configuration.catalogURL = (catalog ?? environment["CAMRIG_CATALOG"]).flatMap { $0.isEmpty ? nil : $0 }
        // Enrollment is on where asked, and in a loopback rig (its CA is at hand) for trying it out.
        let enrollment = serve.enroll || serve.loopback != nil ? try EnrollmentRegistrar(directory: directory, validity: serve.certificateDays * 86_400) : nil
        let service = try await RigService.connect(pool: pool, configuration: configuration, enrollment: enrollment, logger: logger)
        do {
            try await serveAPI(service, tls: tls, directory: directory, identity: identity, host: host, port: port, announceToken: announceToken, logger: logger)
            await service.disconnectCatalog()
        } catch {
            await service.disconnectCatalog()
            throw error
        }
    }

    /// This machine's folder for an object store's catalog and work: --state, else $CAMRIG_STATE, else
    /// $XDG_STATE_HOME/camrig (~/.local/state/camrig), as camrig's.
    private var stateDirectory: URL {
        let environment = ProcessInfo.processInfo.environment
        if let path = state ?? environment["CAMRIG_STATE"] { return URL(fileURLWithPath: path) }
        let base = environment["XDG_STATE_HOME"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state")
        return base.appendingPathComponent("camrig")
    }

    /// Serves the API and the console of `service` until the group ends.
    private func serveAPI(
        _ service: RigService, tls: MutualTLS?, directory: TLSDirectory, identity: String?, host: String, port: Int, announceToken: Bool, logger: Logger
    ) async throws {
        let trustRoot = try directory.trustRoot()
        let consoleDirectory = ServiceServer.consoleDirectory(serve.console)
        guard FileManager.default.fileExists(atPath: consoleDirectory + "/index.html") else {
            throw CommandFailure("the console's files are not in \(consoleDirectory): give --console DIR (Sources/CamRigService/Console in the source tree)")
        }
        let token: String? =
            announceToken
            ? try AccessTokens.issue(name: "operator", role: .operator, expires: Date().addingTimeInterval(86_400), authority: try directory.loadAuthority())
            : nil
        let json = self.json
        let verifier = try ReloadingVerifier(directory: directory)
        let app = try ServiceServer.application(
            service: service, host: host, port: port,
            tls: try ServiceServer.tlsConfiguration(directory: directory, identityName: identity, verifier: verifier),
            trustRoot: trustRoot, verifier: verifier, revokedTokens: TokenDenyList(directory: directory), allowedOrigins: Set(serve.allowOrigin),
            consoleDirectory: consoleDirectory, logger: logger
        ) { bound in
            let shown = ServiceServer.shownHost(host)
            var line = "serving https://\(shown):\(bound)/"
            if let token { line += "\nsign in: https://\(shown):\(bound)/login?token=\(token)\ntls-dir: \(directory.path)" }
            if json {
                var fields = ["url": "https://\(shown):\(bound)/", "port": "\(bound)"]
                if let token {
                    fields["token"] = token
                    fields["tls_dir"] = directory.path
                }
                if let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
                    FileHandle.standardOutput.write(data + Data("\n".utf8))
                }
            } else {
                FileHandle.standardOutput.write(Data((line + "\n").utf8))
            }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: service.services.map { .init(service: $0) } + [.init(service: app)]
                    + (tls.map { [.init(service: RevocationWatch(service: service, tls: $0, directory: directory))] } ?? []),
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}

import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigSecurity
import CamRigService
import Foundation
import Logging
import ServiceLifecycle

/// `camrig serve`: the coordinator as a long-running service with an HTTP API and a web console.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the coordinator as a service: the rig kept connected, measured and locked; an HTTPS API, events and a web console.",
        discussion: """
            Every agent of the rig stays connected and its clock measured; every camera stays in one \
            committed, phase-locked session, rebuilt on its own when an agent restarts or a camera comes or \
            goes. The console and API are served over TLS with the coordinator's certificate: operators \
            present a coordinator certificate or an operator token, viewers a viewer certificate or token \
            (`camrig certs token`). With --loopback N, a rig of N synthetic agents is started on this machine \
            and a sign-in link is printed.
            """
    )

    @Option(name: .long, help: ArgumentHelp("Address to serve the API and console on, HOST:PORT (port 0: any free port).", valueName: "host:port"))
    var listen = "127.0.0.1:8443"

    @Option(name: .long, help: ArgumentHelp("Start this many agents with synthetic cameras on loopback and serve them (certificates in a temporary directory), for trying the console.", valueName: "n"))
    var loopback: Int?

    @Option(name: .long, help: ArgumentHelp("Synthetic cameras per loopback agent.", valueName: "n"))
    var cameras = 1

    @Option(name: .long, help: ArgumentHelp("The console's files (default: the ones built into camrig).", valueName: "dir"))
    var console: String?

    @Flag(name: .long, help: "Do not phase-lock free-running cameras.")
    var noPhaseLock = false

    @Option(name: .long, help: ArgumentHelp("An origin besides the service's own that browsers may change the rig from, e.g. https://rig.example (a reverse proxy in front of the service; repeatable).", valueName: "url"))
    var allowOrigin: [String] = []

    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        _ = try listenAddress()
        if let loopback { guard (1...32).contains(loopback) else { throw ValidationError("--loopback takes 1…32 agents") } }
        guard (1...8).contains(cameras) else { throw ValidationError("--cameras must be within 1…8") }
    }

    func listenAddress() throws -> (host: String, port: Int) {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("--listen '\(listen)' is not HOST:PORT, e.g. 0.0.0.0:8443")
        }
        return (String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port)
    }

    func run() async throws {
        let logger = output.makeLogger(label: "camrig.serve")
        do {
            let (host, port) = try listenAddress()
            if let loopback {
                let local = try await LoopbackRig(agents: LocalAgentSpec.simulated(count: loopback, cameras: cameras), caName: "CamRig console CA")
                try await local.run {
                    let pool = AgentPool(endpoints: local.endpoints, security: try local.clientSecurity(), logger: logger)
                    try await serve(pool: pool, directory: local.pki.directory, identity: "coordinator", host: host, port: port, announceToken: true, logger: logger)
                }
            } else {
                let (endpoints, security) = try rig.resolve(logger: logger)
                guard case .tls(let mutual) = security, let directory = try rig.tlsDirectoryPath() else {
                    throw CommandFailure("camrig serve needs TLS: give --tls-dir DIR (or tls_dir in the rig file) holding ca.pem and a coordinator certificate")
                }
                let pool = AgentPool(endpoints: endpoints, security: security, logger: logger)
                try await serve(
                    pool: pool, directory: TLSDirectory(path: directory), identity: mutual.identity.name, host: host, port: port, announceToken: false,
                    logger: logger)
            }
        } catch {
            throw userFacing(error)
        }
    }

    private func serve(pool: AgentPool, directory: TLSDirectory, identity: String, host: String, port: Int, announceToken: Bool, logger: Logger) async throws {
        let root = URL(fileURLWithPath: captures.out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? "captures")
        var configuration = RigService.Configuration(capturesDirectory: root)
        configuration.phaseLock = !noPhaseLock
        let service = try RigService(pool: pool, configuration: configuration, logger: logger)
        let trustRoot = try directory.trustRoot()
        let consoleDirectory = ServiceServer.consoleDirectory(console)
        guard FileManager.default.fileExists(atPath: consoleDirectory + "/index.html") else {
            throw CommandFailure("the console's files are not in \(consoleDirectory): give --console DIR (Sources/CamRigService/Console in the source tree)")
        }
        let token: String? = announceToken
            ? try AccessTokens.issue(name: "operator", role: .operator, expires: Date().addingTimeInterval(86_400), authority: try directory.loadAuthority())
            : nil
        let json = output.json
        let verifier = try ReloadingVerifier(directory: directory)
        let app = try ServiceServer.application(
            service: service, host: host, port: port,
            tls: try ServiceServer.tlsConfiguration(directory: directory, identityName: identity, verifier: verifier),
            trustRoot: trustRoot, verifier: verifier, revokedTokens: TokenDenyList(directory: directory), allowedOrigins: Set(allowOrigin), consoleDirectory: consoleDirectory, logger: logger
        ) { bound in
            let shown = host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host
            var line = "serving https://\(shown):\(bound)/"
            if let token { line += "\nsign in: https://\(shown):\(bound)/login?token=\(token)\ntls-dir: \(directory.path)" }
            if json {
                var fields = ["url": "https://\(shown):\(bound)/", "port": "\(bound)"]
                if let token { fields["token"] = token; fields["tls_dir"] = directory.path }
                if let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
                    FileHandle.standardOutput.write(data + Data("\n".utf8))
                }
            } else {
                FileHandle.standardOutput.write(Data((line + "\n").utf8))
            }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: RigServiceRunner(service)), .init(service: app)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}

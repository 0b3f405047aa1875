import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigSecurity
import Foundation
import Logging

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
            and a sign-in link is printed. The server itself is the camrig-service program installed beside \
            camrig, which this command runs with the rig resolved.
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
        var arguments = ["--listen", listen, "--cameras", "\(cameras)", "--log-level", output.logLevel.rawValue]
        if let loopback { arguments += ["--loopback", "\(loopback)"] }
        if let console { arguments += ["--console", console] }
        if noPhaseLock { arguments.append("--no-phase-lock") }
        for origin in allowOrigin { arguments += ["--allow-origin", origin] }
        if let out = captures.out { arguments += ["--out", out] }
        if output.json { arguments.append("--json") }
        do {
            if loopback == nil {
                let (endpoints, security) = try rig.resolve(logger: logger)
                guard case .tls(let mutual) = security, let directory = try rig.tlsDirectoryPath() else {
                    throw CommandFailure("camrig serve needs TLS: give --tls-dir DIR (or tls_dir in the rig file) holding ca.pem and a coordinator certificate")
                }
                arguments += ["--tls-dir", directory, "--identity", mutual.identity.name]
                for endpoint in endpoints { arguments += ["--agent", endpoint.description] }
            }
            try Self.exec(try Self.serviceProgram(), arguments)
        } catch {
            throw userFacing(error)
        }
    }

    /// The `camrig-service` program: `$CAMRIG_SERVICE_PROGRAM`, else next to this executable, else on `PATH`.
    static func serviceProgram() throws -> String {
        if let path = ProcessInfo.processInfo.environment["CAMRIG_SERVICE_PROGRAM"] { return path }
        let own = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let sibling = own.appendingPathComponent("camrig-service").path
        if FileManager.default.isExecutableFile(atPath: sibling) { return sibling }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("camrig-service").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw CommandFailure(
            "cannot find camrig-service (the service's HTTP server) next to camrig or on PATH: install it beside camrig, build it (`swift build`), or set CAMRIG_SERVICE_PROGRAM")
    }

    /// Replaces this process with `program`: the service keeps this process's id, standard streams and
    /// signals (systemd's SIGTERM reaches the service itself).
    static func exec(_ program: String, _ arguments: [String]) throws -> Never {
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        execv(program, argv)
        let reason = String(cString: strerror(errno))
        throw CommandFailure("cannot run \(program): \(reason)")
    }
}

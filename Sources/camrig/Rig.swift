import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigSecurity
import CamRigStorage
import CamRigWire
import Foundation
import Logging
import Yams

/// Which agents make up the rig: `--agent` flags, or a rig file.
struct RigOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("An agent, HOST[:PORT] (repeatable).", valueName: "host:port"))
    var agent: [String] = []

    @Option(name: .long, help: ArgumentHelp("Rig file (YAML): `agents:` a list of HOST[:PORT], optional `tls_dir:` and `identity:`. Default $CAMRIG_RIG.", valueName: "file"))
    var rig: String?

    @Option(name: .long, help: ArgumentHelp("Directory with ca.pem and this client's certificate (default: the rig file's tls_dir).", valueName: "dir"))
    var tlsDir: String?

    @Option(name: .long, help: ArgumentHelp("Certificate name to present (default: the only coordinator certificate).", valueName: "name"))
    var identity: String?

    @Flag(name: .long, help: "Connect without TLS, to agents started with --insecure. Development only.")
    var insecure = false

    @Option(name: .long, help: "Seconds to wait for every agent to connect and measure its clock.")
    var connectTimeout = 5.0

    /// The rig file's shape.
    struct RigFile: Decodable {
        var agents: [String]
        var tlsDir: String?
        var identity: String?

        enum CodingKeys: String, CodingKey {
            case agents
            case tlsDir = "tls_dir"
            case identity
        }
    }

    func resolve() throws -> (endpoints: [AgentEndpoint], tlsDir: String?, identity: String?) {
        var addresses = agent
        var tls = tlsDir
        var name = identity
        if let path = rig ?? ProcessInfo.processInfo.environment["CAMRIG_RIG"] {
            let file: RigFile
            do {
                file = try YAMLDecoder().decode(RigFile.self, from: String(contentsOfFile: path, encoding: .utf8))
            } catch {
                throw ValidationError("cannot read the rig file \(path): \(error)")
            }
            if addresses.isEmpty { addresses = file.agents }
            tls = tls ?? file.tlsDir
            name = name ?? file.identity
        }
        guard !addresses.isEmpty else {
            throw ValidationError("no agents: pass --agent HOST:PORT (repeatable) or --rig FILE")
        }
        let endpoints = try addresses.map { text -> AgentEndpoint in
            guard let endpoint = AgentEndpoint(text) else { throw ValidationError("agent '\(text)' is not HOST[:PORT] (IPv6 as [ADDR]:PORT)") }
            return endpoint
        }
        if insecure && tls != nil { throw ValidationError("--insecure and --tls-dir exclude each other") }
        if !insecure && tls == nil {
            throw ValidationError("agents require TLS: pass --tls-dir DIR (see `camrig certs init`) or set tls_dir in the rig file; --insecure for agents started with --insecure")
        }
        return (endpoints, tls, name)
    }

    /// Connects to every agent, waits for clock estimates, runs `body`, disconnects.
    func withPool<T>(logger: Logger, clockSamples: Int = 16, _ body: (AgentPool) async throws -> T) async throws -> T {
        let (endpoints, tls, name) = try resolve()
        let security: ClientSecurity = insecure ? .insecure : .tls(try MutualTLS.client(directory: TLSDirectory(path: tls!), identityName: name))
        if insecure { logger.warning("connecting WITHOUT TLS (--insecure): nothing is encrypted or authenticated") }
        let pool = AgentPool(endpoints: endpoints, security: security, logger: logger)
        pool.start()
        let notReady = await pool.waitUntilReady(clockSamples: clockSamples, timeout: .milliseconds(Int64(connectTimeout * 1000)))
        for agent in notReady {
            let snapshot = agent.snapshot
            var reason = snapshot.status.name
            if case .down(let why, _) = snapshot.status { reason = why }
            logger.warning("agent not ready; going on without it", metadata: ["agent": "\(snapshot.name)", "reason": "\(reason)"])
        }
        do {
            let result = try await body(pool)
            await pool.stop()
            return result
        } catch {
            await pool.stop()
            throw error
        }
    }
}

/// Where captures and their catalog live.
struct CaptureOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Captures directory: one folder per capture and catalog.sqlite (default $CAMRIG_CAPTURES or ./captures).", valueName: "dir"))
    var out: String?

    func store() throws -> CaptureStore {
        let path = out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? "captures"
        return try CaptureStore(root: URL(fileURLWithPath: path))
    }
}

/// One agent as `camrig agents` and `camrig sync status` show it.
struct AgentStatusOutput: Encodable {
    var agent: String
    var address: String
    var status: String
    var reason: String?
    var software: String
    var lastSeen: String?
    var connectAttempts: Int
    var offsetUs: Double?
    var driftPpm: Double?
    var errorBoundUs: Double?
    var minRoundTripUs: Double?
    var samples: Int
    var clockJumps: Int
    /// tls, udp or udp-kernel.
    var clockTransport: String?

    init(_ snapshot: RemoteAgent.Snapshot) {
        agent = snapshot.name
        address = snapshot.endpoint.description
        status = snapshot.status.name
        if case .down(let why, _) = snapshot.status { reason = why }
        software = snapshot.software
        lastSeen = snapshot.lastSeen.map { ISO8601DateFormatter().string(from: $0) }
        connectAttempts = snapshot.connectAttempts
        if let clock = snapshot.clock {
            offsetUs = clock.offsetNanoseconds / 1000
            driftPpm = clock.driftPPM
            errorBoundUs = clock.errorBoundNanoseconds / 1000
            minRoundTripUs = Double(clock.minimumRoundTrip) / 1000
        }
        samples = snapshot.clockSamples
        clockJumps = snapshot.clockJumps
        clockTransport = snapshot.clockTransport?.rawValue
    }
}

/// `camrig agents`: every agent's connection and health.
struct Agents: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Connect to the rig's agents and show each one's state, clock and last sign of life.")

    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let logger = output.makeLogger()
        do {
            let agents = try await rig.withPool(logger: logger, clockSamples: 8) { pool in pool.agents.map { AgentStatusOutput($0.snapshot) } }
            if output.json {
                try printJSON(["agents": agents], snakeCase: true)
            } else {
                print(table(
                    ["AGENT", "ADDRESS", "STATUS", "SOFTWARE", "OFFSET µs", "±µs", "RTT µs", "LAST SEEN"],
                    agents.map { [$0.agent, $0.address, $0.status, $0.software,
                                  $0.offsetUs.map { String(format: "%.1f", $0) } ?? "-", $0.errorBoundUs.map { String(format: "%.1f", $0) } ?? "-",
                                  $0.minRoundTripUs.map { String(format: "%.1f", $0) } ?? "-", $0.lastSeen ?? "never"] }
                ))
                for agent in agents { if let reason = agent.reason { print("\(agent.agent): \(reason)") } }
            }
            if agents.contains(where: { $0.status != "connected" }) { throw ExitCode(2) }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw userFacing(error)
        }
    }
}

/// `camrig sync status`: every agent's clock against the coordinator's.
struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Clock synchronization with the rig's agents.", subcommands: [Status.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Probe every agent's clock and report offset, drift, round trip and error bound.",
            discussion: "Offsets are agent − coordinator, estimated from four-timestamp probes over each agent's TLS connection (lowest-round-trip samples, drift fitted by regression)."
        )

        @Option(name: .long, help: "Seconds to probe before reporting.")
        var seconds = 2.0

        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let agents = try await rig.withPool(logger: logger, clockSamples: 8) { pool in
                    try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
                    return pool.agents.map { AgentStatusOutput($0.snapshot) }
                }
                if output.json {
                    try printJSON(["agents": agents], snakeCase: true)
                } else {
                    print(table(
                        ["AGENT", "OFFSET µs", "DRIFT ppm", "ERROR BOUND µs", "MIN RTT µs", "SAMPLES", "JUMPS", "PROBES"],
                        agents.map { [$0.agent, $0.offsetUs.map { String(format: "%.1f", $0) } ?? "-", $0.driftPpm.map { String(format: "%.2f", $0) } ?? "-",
                                      $0.errorBoundUs.map { String(format: "%.1f", $0) } ?? "-", $0.minRoundTripUs.map { String(format: "%.1f", $0) } ?? "-",
                                      "\($0.samples)", "\($0.clockJumps)", $0.clockTransport ?? "-"] }
                    ))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}

import CamRigCLI
import ArgumentParser
import CamRigCoordinator
import CamRigWire
import Foundation
import Logging
import Yams

/// Which agents make up the rig and how to reach them: `--agent` flags, or a rig file.
struct RigOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("An agent, HOST[:PORT] (repeatable).", valueName: "host:port"), transform: AgentEndpoint.argument)
    var agent: [AgentEndpoint] = []

    @Option(
        name: .long,
        help: ArgumentHelp("Rig file (YAML): `agents:` a list of HOST[:PORT], optional `tls_dir:` and `identity:`. Default $CAMRIG_RIG.", valueName: "file")
    )
    var rig: String?

    @OptionGroup var tls: TLSOptions

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

    func validate() throws {
        guard connectTimeout > 0 else { throw ValidationError("--connect-timeout must be positive") }
    }

    /// The agents and the client's security: flags over the rig file.
    func resolve(logger: Logger) throws -> (endpoints: [AgentEndpoint], security: ClientSecurity) {
        var endpoints = agent
        var file: RigFile?
        if let path = rig ?? ProcessInfo.processInfo.environment["CAMRIG_RIG"] {
            do {
                file = try YAMLDecoder().decode(RigFile.self, from: String(contentsOfFile: path, encoding: .utf8))
            } catch {
                throw ValidationError("cannot read the rig file \(path): \(error)")
            }
            if endpoints.isEmpty, let file {
                endpoints = try file.agents.map { try AgentEndpoint.argument($0) }
            }
        }
        guard !endpoints.isEmpty else {
            throw ValidationError("no agents: pass --agent HOST:PORT (repeatable) or --rig FILE")
        }
        let security = try tls.clientSecurity(
            fallbackDirectory: file?.tlsDir, fallbackIdentity: file?.identity, from: "the rig file's tls_dir", logger: logger
        )
        return (endpoints, security)
    }

    /// Connects to every agent, waits for clock estimates, runs `body`, disconnects.
    func withPool<T>(logger: Logger, clockSamples: Int = 16, _ body: (AgentPool) async throws -> T) async throws -> T {
        let (endpoints, security) = try resolve(logger: logger)
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

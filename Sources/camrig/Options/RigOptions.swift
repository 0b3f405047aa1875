import CamRigCLI
import CamRigCapture
import CamRigSecurity
import CamRigServiceClient
import CamRigViews
import ArgumentParser
import CamRigCoordinator
import CamRigObjectStore
import CamRigStorage
import CamRigWire
import Foundation
import NIOSSL
import Logging
import Yams

/// Which agents make up the rig and how to reach them: `--agent` flags, or a rig file.
struct RigOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("An agent, HOST[:PORT] (repeatable).", valueName: "host:port"), transform: AgentEndpoint.argument)
    var agent: [AgentEndpoint] = []

    @Option(
        name: .long,
        help: ArgumentHelp("Rig file (YAML): `agents:` a list of HOST[:PORT], optional `name:`, `tls_dir:` and `identity:`. Default $CAMRIG_RIG.", valueName: "file")
    )
    var rig: String?

    @Option(
        name: .long,
        help: ArgumentHelp("The rig's name, recorded with its captures in the catalog (default: the rig file's `name:`, else this host's name).", valueName: "name"))
    var rigName: String?

    @OptionGroup var tls: TLSOptions

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A running `camrig serve` to go through, https://HOST:PORT (default: the rig file's `service:`, or $CAMRIG_SERVICE); when it does not answer, the command works with the agents directly.",
            valueName: "url"))
    var service: String?

    @Option(name: .long, help: "Seconds to wait for every agent to connect and measure its clock.")
    var connectTimeout = 5.0

    @Option(
        name: .long,
        help: "Seconds to wait, once connected, for every clock estimate to settle: drift known well enough that the error bound still holds a second ahead (0: do not wait)."
    )
    var settleTimeout = 10.0

    /// The rig file's shape.
    struct RigFile: Decodable {
        /// The rig's name in a catalog several rigs share.
        var name: String?
        var agents: [String]
        var tlsDir: String?
        var identity: String?
        /// Where `camrig serve` runs for this rig, https://HOST:PORT.
        var service: String?
        /// Where captures go when it is an S3-compatible store: `url: s3://BUCKET/PREFIX` and its settings
        /// (each over the AWS_* environment variables).
        var store: ObjectStoreLocation.Settings?

        enum CodingKeys: String, CodingKey {
            case name
            case agents
            case tlsDir = "tls_dir"
            case identity
            case service
            case store
        }
    }

    func validate() throws {
        guard connectTimeout > 0 else { throw ValidationError("--connect-timeout must be positive") }
        guard settleTimeout >= 0 else { throw ValidationError("--settle-timeout must not be negative") }
    }

    /// The agents and the client's security: flags over the rig file.
    /// `allowingNoAgents`: a rig whose agents all join by enrollment (`camrig serve --enroll`).
    func resolve(logger: Logger, allowingNoAgents: Bool = false) throws -> (endpoints: [AgentEndpoint], security: ClientSecurity) {
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
        guard !endpoints.isEmpty || allowingNoAgents else {
            throw ValidationError("no agents: pass --agent HOST:PORT (repeatable) or --rig FILE")
        }
        let security = try tls.clientSecurity(
            fallbackDirectory: file?.tlsDir, fallbackIdentity: file?.identity, from: "the rig file's tls_dir", logger: logger
        )
        return (endpoints, security)
    }

    /// The rig file, when there is one and it can be read.
    private func rigFile() -> RigFile? {
        guard let path = rig ?? ProcessInfo.processInfo.environment["CAMRIG_RIG"] else { return nil }
        return try? YAMLDecoder().decode(RigFile.self, from: String(contentsOfFile: path, encoding: .utf8))
    }

    /// The running service the command should go through: the one --service, the rig file's `service:` or
    /// $CAMRIG_SERVICE names, when it answers with this machine's certificate. Nil (the command then
    /// works with the agents directly) when none is named, or when the one named does not answer, which
    /// is said on standard error. A service that answers but refuses this machine's certificate is an error:
    /// going around it would hide why (and find the cameras leased by it).
    func runningService(logger: Logger) async throws -> ServiceClient? {
        let file = rigFile()
        guard let url = service ?? file?.service ?? ProcessInfo.processInfo.environment["CAMRIG_SERVICE"], !url.isEmpty else { return nil }
        do {
            guard let directory = try tlsDirectoryPath() else { return nil }
            let client = try ServiceClient(url: url, directory: TLSDirectory(path: directory), identityName: tls.identity ?? file?.identity)
            do {
                // A service that does not answer within seconds is gone around (said below), not waited for.
                let _: Access = try await client.get("/api/v1/whoami", timeout: .seconds(10))
                return client
            } catch {
                await client.shutdown()
                throw error
            }
        } catch let invalid as ServiceClient.InvalidAddress {
            throw CommandFailure("\(invalid) (from --service, the rig file's service: or CAMRIG_SERVICE)")
        } catch let failure as ServiceClient.Failure {
            // It answered: going around it would hide the reason (and find its cameras leased by it).
            if failure.status == 401 || failure.status == 403 {
                throw CommandFailure("the service at \(url) refused this command's certificate: \(failure.detail)")
            }
            throw CommandFailure("the service at \(url) answered HTTP \(failure.status): \(failure.detail); is --service the address of `camrig serve`?")
        } catch let error as NIOSSLError {
            throw CommandFailure("the service at \(url) refused the TLS handshake (\(error)): is this machine's certificate from the rig's CA, of the coordinator role, and not revoked?")
        } catch {
            FileHandle.standardError.write(Data("camrig: the service at \(url) does not answer (\(error)); working with the agents directly\n".utf8))
            return nil
        }
    }

    /// Runs `body` with the running service when there is one (see `runningService`); nil when there is
    /// none, and the command works with the agents directly.
    func throughService<T>(logger: Logger, _ body: (ServiceClient) async throws -> T) async throws -> T? {
        guard let client = try await runningService(logger: logger) else { return nil }
        do {
            let result = try await body(client)
            await client.shutdown()
            return result
        } catch let failure as ServiceClient.Failure {
            await client.shutdown()
            throw CommandFailure("the service at \(client.url): \(failure.detail)")
        } catch {
            await client.shutdown()
            throw error
        }
    }

    /// The rig file's `store:` settings (none without a rig file, or when it says nothing of a store).
    func storeSettings() -> ObjectStoreLocation.Settings {
        rigFile()?.store ?? ObjectStoreLocation.Settings()
    }

    /// The rig's name: --rig-name, else the rig file's `name:`, else this host's name.
    func resolvedRigName() throws -> String {
        do {
            if let rigName { return try CaptureNaming.checkRig(rigName, from: "--rig-name") }
            if let name = rigFile()?.name { return try CaptureNaming.checkRig(name, from: "the rig file's name:") }
        } catch let error as StorageError {
            throw ValidationError(error.description)
        }
        return CaptureNaming.hostRig
    }

    /// The TLS directory: --tls-dir, else the rig file's tls_dir; nil with --insecure.
    func tlsDirectoryPath() throws -> String? {
        try tls.directory(fallback: rigFile()?.tlsDir)
    }

    /// Connects to every agent, waits for clock estimates (and, with `settle`, until they are settled),
    /// runs `body`, disconnects.
    func withPool<T>(logger: Logger, clockSamples: Int = 16, settle: Bool = true, _ body: (AgentPool) async throws -> T) async throws -> T {
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
        if clockSamples > 0, settle, settleTimeout > 0 {
            await Self.settleClocks(pool, timeout: settleTimeout, logger: logger)
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

    /// Waits up to `timeout` seconds for every connected agent's clock estimate to settle. A wait longer
    /// than a second is announced on standard error, and an estimate that does not settle is named in
    /// a warning with the bound it has: its timestamps are then less certain than a settled one's.
    static func settleClocks(_ pool: AgentPool, timeout: Double, logger: Logger) async {
        let announcement = Task {
            try await Task.sleep(for: .seconds(1))
            let waiting = pool.agents.filter { agent in
                let snapshot = agent.snapshot
                return snapshot.status == .connected && !(snapshot.clock?.isSettled() ?? false)
            }
            guard !waiting.isEmpty else { return }
            let names = waiting.prefix(4).map(\.name).joined(separator: ", ") + (waiting.count > 4 ? " and \(waiting.count - 4) more" : "")
            FileHandle.standardError.write(Data("camrig: waiting for the clock estimates of \(names) to settle (drift still uncertain; up to \(Int(timeout)) s, --settle-timeout)\n".utf8))
        }
        let unsettled = await pool.waitUntilSettled(timeout: .milliseconds(Int64(timeout * 1000)))
        announcement.cancel()
        for agent in unsettled {
            let snapshot = agent.snapshot
            guard let clock = snapshot.clock else { continue }
            logger.warning(
                "clock estimate not settled; going on with its wider error bound",
                metadata: [
                    "agent": "\(snapshot.name)",
                    "error_bound_us": "\(String(format: "%.1f", clock.errorBoundNanoseconds / 1000))",
                    "drift_uncertainty_ppm": "\(String(format: "%.1f", clock.driftUncertaintyPPM))",
                    "samples": "\(clock.sampleCount)",
                ]
            )
        }
    }
}

import ArgumentParser
import CamRigAgent
import CamRigClock
import CamRigDevices
import CamRigSecurity
import Foundation
import Logging
import NIOCore
import ServiceLifecycle

/// `camrig-agent --hosts N`: N camera hosts in one process, for benchmarks of one coordinator against
/// many agents on one machine. Each simulated host is a whole agent, exactly as a separate process
/// would run it (its own `AgentServer`, listener, TLS identity, UDP clock channel, trigger thread,
/// spool, clock and synthetic cameras), sharing only the process's event loops. What they do not
/// have is a core each: on a small machine their threads compete, so their timing is the machine's,
/// not a real rig's, and they never ask for real-time priority.
struct HostSimulation {
    let settings: AgentCommand.Settings
    let count: Int
    let first: Int
    let clockErrors: Bool
    /// The `CLOCK_MONOTONIC` instant from which simulated drifts accumulate.
    let epoch: Int64

    /// Logging is set up by the caller.
    func run() async throws {
        let logger = Logger(label: "camrig.agent")
        guard !settings.insecure, let tlsDir = settings.tlsDir else {
            throw ValidationError("--hosts simulates hosts with certificates of their own: give --tls-dir with PREFIX-K certificates")
        }
        let directory = TLSDirectory(path: tlsDir)
        let prefix = settings.identity ?? "agent"
        var servers: [(name: String, server: AgentServer)] = []
        for number in first..<(first + count) {
            let name = "\(prefix)-\(number)"
            var hostLogger = logger
            hostLogger[metadataKey: "host"] = "\(name)"
            var clock = settings.clock
            if clockErrors {
                let error = HostClock.simulatedError(host: number - 1)
                clock = HostClock(offsetNanoseconds: Int64((error.offsetMicroseconds * 1000).rounded()), driftPPM: error.driftPPM, epoch: epoch)
            }
            let tls: MutualTLS
            do {
                tls = try MutualTLS.agent(directory: directory, identityName: name)
            } catch let error as SecurityError {
                throw ValidationError("simulated host \(name): \(error.message)")
            }
            let spoolPath = URL(fileURLWithPath: settings.spoolDir).appendingPathComponent(name)
            let spool: ResultSpool
            do {
                spool = try ResultSpool(directory: spoolPath, capacityBytes: UInt64(settings.spoolSizeMB) << 20)
            } catch {
                throw ValidationError("simulated host \(name): cannot use \(spoolPath.path) as its spool: \(error)")
            }
            let providers: [any DeviceProvider] =
                settings.synthetic > 0
                ? [SyntheticDeviceProvider(count: settings.synthetic, seed: settings.syntheticSeed &+ UInt64(number) &* 16, clock: clock, highSpeed: settings.syntheticHighSpeed)]
                : []
            let discovery = DeviceDiscovery(providers: providers)
            let server = AgentServer(
                configuration: settings.configuration(
                    port: 0, security: .tls(tls), agentID: name,
                    devices: AgentDevices(discovery: discovery, agentID: name, clock: clock, logger: hostLogger),
                    spool: spool, realtimeTriggers: false),
                logger: hostLogger
            )
            servers.append((name, server))
        }
        let group = ServiceGroup(
            configuration: .init(
                services: servers.map { .init(service: $0.server) },
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        let announce = Task {
            var entries: [String] = []
            for (name, server) in servers {
                guard let address = try? await server.localAddress else { return }
                entries.append("\(name)=\(address.ipAddress ?? settings.listenHost):\(address.port ?? 0)")
            }
            logger.info("simulating hosts", metadata: ["hosts": "\(count)", "first": "\(prefix)-\(first)"])
            FileHandle.standardOutput.write(Data(("hosts " + entries.joined(separator: " ") + "\n").utf8))
        }
        defer { announce.cancel() }
        try await group.run()
    }
}

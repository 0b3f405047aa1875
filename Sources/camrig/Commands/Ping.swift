import CamRigClock
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigWire
import CamRigWireModel
import NIOCore

/// `camrig ping`: is an agent there, who is it, and how far away.
struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to an agent, complete the handshake and measure round trips.",
        discussion: "Exits with status 1 when the agent cannot be reached or refuses this client."
    )

    @Option(name: .long, help: ArgumentHelp("Agent address, HOST[:PORT] (default port 7450).", valueName: "host:port"), transform: AgentEndpoint.argument)
    var agent: AgentEndpoint

    @Option(name: .shortAndLong, help: "Number of pings.")
    var count = 4

    @Option(name: .long, help: "Milliseconds between pings.")
    var intervalMs = 100

    @Option(name: .long, help: "Seconds to wait for the connection, the handshake and each reply.")
    var timeout = 5.0

    @OptionGroup var tls: TLSOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        _ = try tls.directory()
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        guard intervalMs >= 0, timeout > 0 else { throw ValidationError("--interval-ms and --timeout must not be negative") }
    }

    func run() async throws {
        let logger = output.makeLogger()
        let endpoint = agent
        let wait = TimeAmount.nanoseconds(Int64(timeout * 1e9))
        do {
            let client = try await AgentClient.connect(
                to: endpoint,
                security: try tls.clientSecurity(logger: logger),
                timeout: wait,
                logger: logger
            )
            let welcome = client.welcome
            if !output.json {
                print(
                    "agent \(welcome.agentID) at \(endpoint): protocol \(welcome.protocolVersion), \(welcome.agentSoftware); "
                        + "we are '\(welcome.clientName)' (\(welcome.clientRole.roleName))"
                )
            }
            var samples: [Double] = []
            for index in 0..<count {
                if index > 0 && intervalMs > 0 { try await Task.sleep(for: .milliseconds(intervalMs)) }
                let rtt = try await client.ping(timeout: wait)
                samples.append(rtt.microseconds)
                if !output.json { print("pong \(index + 1): \(format(rtt.microseconds)) µs") }
            }
            await client.close()
            let summary = RoundTripSummary(samples)
            if output.json {
                try printJSON(
                    PingOutput(
                        agent: .init(
                            id: welcome.agentID,
                            address: endpoint.description,
                            protocolVersion: welcome.protocolVersion,
                            software: welcome.agentSoftware,
                            capabilities: welcome.capabilities
                        ),
                        client: .init(name: welcome.clientName, role: welcome.clientRole.roleName),
                        rttUs: samples,
                        summary: summary
                    ),
                    snakeCase: true
                )
            } else {
                print(
                    "\(count) pings: min \(format(summary.minUs)) / median \(format(summary.p50Us)) / mean \(format(summary.meanUs)) / max \(format(summary.maxUs)) µs"
                )
            }
        } catch {
            throw userFacing(error)
        }
    }

    private func format(_ value: Double) -> String {
        String(Int(value.rounded()))
    }
}

import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigWire
import NIOCore
import Foundation

/// `camrig ping`: is an agent there, who is it, and how far away.
struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to an agent, complete the handshake and measure round trips.",
        discussion: "Exits with status 1 when the agent cannot be reached or refuses this client."
    )

    @Option(name: .long, help: ArgumentHelp("Agent address, HOST[:PORT] (default port 7450).", valueName: "host:port"))
    var agent: String

    @Option(name: .shortAndLong, help: "Number of pings.")
    var count = 4

    @Option(name: .long, help: "Milliseconds between pings.")
    var intervalMs = 100

    @Option(name: .long, help: "Seconds to wait for the connection, the handshake and each reply.")
    var timeout = 5.0

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard AgentEndpoint(agent) != nil else {
            throw ValidationError("--agent '\(agent)' is not HOST[:PORT] (IPv6 as [ADDR]:PORT)")
        }
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        guard intervalMs >= 0, timeout > 0 else { throw ValidationError("--interval-ms and --timeout must not be negative") }
    }

    func run() async throws {
        let logger = output.makeLogger()
        let endpoint = AgentEndpoint(agent)!
        let wait = TimeAmount.nanoseconds(Int64(timeout * 1e9))
        do {
            let client = try await AgentClient.connect(
                to: endpoint,
                security: try connection.security(logger: logger),
                timeout: wait,
                logger: logger
            )
            let welcome = client.welcome
            if !output.json {
                print(
                    "agent \(welcome.agentID) at \(endpoint): protocol \(welcome.protocolVersion), \(welcome.agentSoftware); "
                        + "we are '\(welcome.clientName)' (\(welcome.clientRole.name))"
                )
            }
            var samples: [Double] = []
            for index in 0..<count {
                if index > 0 && intervalMs > 0 { try await Task.sleep(for: .milliseconds(intervalMs)) }
                let rtt = try await client.ping(timeout: wait)
                let microseconds = Double(rtt.components.attoseconds) / 1e12 + Double(rtt.components.seconds) * 1e6
                samples.append(microseconds)
                if !output.json { print("pong \(index + 1): \(format(microseconds)) µs") }
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
                        client: .init(name: welcome.clientName, role: welcome.clientRole.name),
                        rttUs: samples,
                        summary: summary
                    )
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

struct RoundTripSummary: Encodable {
    var minUs: Double
    var p50Us: Double
    var meanUs: Double
    var maxUs: Double

    init(_ samples: [Double]) {
        let sorted = samples.sorted()
        minUs = sorted.first ?? 0
        maxUs = sorted.last ?? 0
        p50Us = sorted.isEmpty ? 0 : sorted[(sorted.count - 1) / 2]
        meanUs = sorted.isEmpty ? 0 : sorted.reduce(0, +) / Double(sorted.count)
    }

    enum CodingKeys: String, CodingKey {
        case minUs = "min_us", p50Us = "p50_us", meanUs = "mean_us", maxUs = "max_us"
    }
}

struct PingOutput: Encodable {
    struct Agent: Encodable {
        var id: String
        var address: String
        var protocolVersion: UInt32
        var software: String
        var capabilities: [String]

        enum CodingKeys: String, CodingKey {
            case id, address, software, capabilities
            case protocolVersion = "protocol_version"
        }
    }

    struct Client: Encodable {
        var name: String
        var role: String
    }

    var agent: Agent
    var client: Client
    var rttUs: [Double]
    var summary: RoundTripSummary

    enum CodingKeys: String, CodingKey {
        case agent, client, summary
        case rttUs = "rtt_us"
    }
}

extension WirePeerRole {
    var name: String {
        switch self {
        case .agent: "agent"
        case .coordinator: "coordinator"
        case .viewer: "viewer"
        case .unspecified, .UNRECOGNIZED: "unknown"
        }
    }
}

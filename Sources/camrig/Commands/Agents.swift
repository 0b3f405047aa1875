import CamRigServiceClient
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import Foundation

/// `camrig agents`: every agent's connection and health.
struct Agents: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Connect to the rig's agents and show each one's state, clock and last sign of life.")

    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let logger = output.makeLogger()
        do {
            let agents: [AgentStatusOutput]
            if let served = try await rig.throughService(logger: logger, { try await $0.get("/api/v1/agents", as: [AgentStatusOutput].self) }) {
                agents = served
            } else {
                agents = try await rig.withPool(logger: logger, clockSamples: 8, settle: false) { pool in pool.agents.map { AgentStatusOutput($0.snapshot) } }
            }
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

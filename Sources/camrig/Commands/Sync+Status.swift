import CamRigDeviceModel
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigWire
import Foundation

extension Sync {
    /// `camrig sync status`: every agent's clock against the coordinator's.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Probe every agent's clock and report offset, drift, round trip and error bound.",
            discussion: "Offsets are agent − coordinator, estimated from four-timestamp probes over each agent's TLS connection (lowest-round-trip samples, drift fitted by regression)."
        )

        @Option(name: .long, help: "Seconds to probe before reporting.")
        var seconds = 2.0

        @Flag(name: .long, help: "Also lock every camera's phase onto one frame grid (a session over the cameras, as `camrig capture` makes) and report each camera's lock state and phase error.")
        var lock = false

        @OptionGroup var session: SessionOptions
        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let (agents, phases) = try await rig.withPool(logger: logger, clockSamples: 8) { pool in
                    var phases: [PhaseOutput] = []
                    if lock {
                        let rigSession = try await session.makeSession(pool: pool, preset: .high, fps: nil, logger: logger)
                        try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
                        phases = await rigSession.phaseStatus().map(PhaseOutput.init)
                        await rigSession.stop()
                    } else {
                        try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
                        phases = await Self.heldLocks(pool)
                    }
                    return (pool.agents.map { AgentStatusOutput($0.snapshot) }, phases)
                }
                if output.json {
                    try printJSON(Report(agents: agents, cameras: phases), snakeCase: true)
                } else {
                    print(table(
                        ["AGENT", "OFFSET µs", "DRIFT ppm", "ERROR BOUND µs", "MIN RTT µs", "SAMPLES", "JUMPS", "PROBES"],
                        agents.map { [$0.agent, $0.offsetUs.map { String(format: "%.1f", $0) } ?? "-", Self.drift($0),
                                      $0.errorBoundUs.map { String(format: "%.1f", $0) } ?? "-", $0.minRoundTripUs.map { String(format: "%.1f", $0) } ?? "-",
                                      "\($0.samples)", "\($0.clockJumps)", $0.clockTransport ?? "-"] }
                    ))
                    if !phases.isEmpty {
                        print("")
                        print(PhaseOutput.table(phases))
                    }
                }
            } catch {
                throw userFacing(error)
            }
        }

        /// Drift with its uncertainty, and a mark while the estimate is not settled.
        static func drift(_ agent: AgentStatusOutput) -> String {
            guard let drift = agent.driftPpm else { return "-" }
            var text = String(format: "%.2f", drift)
            if let uncertainty = agent.driftUncertaintyPpm { text += String(format: " ±%.1f", uncertainty) }
            if agent.clockSettled == false { text += " (settling)" }
            return text
        }

        struct Report: Encodable {
            var agents: [AgentStatusOutput]
            /// Cameras under a phase lock (every camera with `--lock`).
            var cameras: [PhaseOutput]
        }

        /// The phase locks the agents hold now (for a session of another coordinator process, say).
        static func heldLocks(_ pool: AgentPool) async -> [PhaseOutput] {
            var phases: [PhaseOutput] = []
            for agent in pool.agents {
                guard let client = try? agent.client(),
                    case .phaseStatusList(let list)? = try? await client.request(.getPhaseStatus(WireGetPhaseStatus())).frame.envelope.body
                else { continue }
                phases += list.devices.map { PhaseOutput(camera: "\(agent.name)/\($0.deviceID)", $0) }
            }
            return phases
        }
    }
}
